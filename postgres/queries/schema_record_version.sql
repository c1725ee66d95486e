{{/* Records one applied migration. */}}
INSERT INTO "{{.Index "schema"}}" (version, name) VALUES (@version, @name)
