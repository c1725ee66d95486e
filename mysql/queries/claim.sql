{{/* Inserts the in-flight record. A duplicate key (1062) means another
transaction holds or held it: peek reads it. The record lives
@retention_us after the claim. */ -}}
INSERT INTO `{{.Name}}` (scope, idem_key, fingerprint, created_at, expires_at)
VALUES (@scope, @key, @fingerprint, {{template "now"}},
	{{template "now"}} + INTERVAL @retention_us MICROSECOND)
