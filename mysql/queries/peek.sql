{{/* After a claim that lost: the record it lost to, with a locking read
that waits for the transaction holding it. */ -}}
SELECT {{template "columns"}}
FROM `{{.Name}}`
WHERE scope = @scope AND idem_key = @key
LOCK IN SHARE MODE
