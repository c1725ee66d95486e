{{/* Stores the responses of a batch's won keys, as complete does for one:
one row per key of the derived table the dialect writes in place of the
comment below (batch_scope, batch_key, batch_fingerprint, batch_status,
batch_header, batch_body), joined first, to the records by primary key. */ -}}
UPDATE /* keys */ AS k
STRAIGHT_JOIN `{{.Name}}` AS r ON r.scope = k.batch_scope AND r.idem_key = k.batch_key
	AND r.fingerprint = k.batch_fingerprint AND r.status IS NULL
SET r.status = k.batch_status, r.header = k.batch_header, r.body = k.batch_body,
	r.expires_at = GREATEST(r.expires_at, {{template "now"}} + INTERVAL @retention_us MICROSECOND)
