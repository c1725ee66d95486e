{{/* A batch claim's second statement: inserts the in-flight records of the
keys peek_batch found no record for, one row of the derived table the
dialect writes in place of the comment below (batch_scope, batch_key,
batch_fingerprint). A key another transaction inserted meanwhile fails the
whole statement with a duplicate key (1062), and the batch is retried. The
records live @retention_us after the claim. */ -}}
INSERT INTO `{{.Name}}` (scope, idem_key, fingerprint, created_at, expires_at)
SELECT k.batch_scope, k.batch_key, k.batch_fingerprint, {{template "now"}},
	{{template "now"}} + INTERVAL @retention_us MICROSECOND
FROM /* keys */ AS k
