{{/* The highest applied version, NULL when none is. */}}
SELECT max(version) FROM "{{.Index "schema"}}"
