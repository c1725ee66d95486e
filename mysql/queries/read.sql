{{/* The record of a key, with a plain (consistent) read. */ -}}
SELECT {{template "columns"}}
FROM `{{.Name}}`
WHERE scope = @scope AND idem_key = @key
