{{/* The migration runner binds @version and @name by position, in this
order. */ -}}
INSERT INTO "{{.Index "schema"}}" (version, name, applied_at)
VALUES (@version, @name, CAST(unixepoch('subsec') * 1000000 AS INTEGER))
