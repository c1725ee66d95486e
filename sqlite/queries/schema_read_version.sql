SELECT MAX(version) FROM "{{.Index "schema"}}"
