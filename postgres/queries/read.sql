{{/* The record of a key, if any. */}}
SELECT {{template "columns"}} FROM "{{.Name}}" WHERE scope = @scope AND idem_key = @key
