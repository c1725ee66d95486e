{{/* Locks up to @limit expired records, skipping those a claim holds; the
DELETE of the keys it returns is built per batch (statements.go). */ -}}
SELECT scope, idem_key, token FROM `{{.Name}}`
WHERE expires_at <= {{template "now"}}
ORDER BY expires_at LIMIT @limit FOR UPDATE SKIP LOCKED
