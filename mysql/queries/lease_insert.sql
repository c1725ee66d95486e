{{/* Inserts a pending record holding a lease of @lease_us, unless the key
has a record (1062). The record lives at least @retention_us and at least
its lease. Its token is stamped by lease_stamp_token once the row is this
transaction's. The derived table reads the clock once. */ -}}
INSERT INTO `{{.Name}}` (scope, idem_key, fingerprint, created_at, expires_at, token, lease_until)
SELECT @scope, @key, @fingerprint, c.n,
	GREATEST(c.n + INTERVAL @retention_us MICROSECOND, c.n + INTERVAL @lease_us MICROSECOND),
	0, c.n + INTERVAL @lease_us MICROSECOND
FROM (SELECT {{template "now"}} AS n) AS c
