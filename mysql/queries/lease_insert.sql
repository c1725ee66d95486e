{{/* Inserts a pending record holding a lease of @lease_us, unless the key
has a record (1062). The record lives at least @retention_us and at least
its lease. Its token is stamped by lease_stamp_token once the row is this
transaction's. A plain VALUES row, not INSERT ... SELECT: vtgate runs the
SELECT of such an insert on a shard of its choice, which would join that
shard to the transaction. UTC_TIMESTAMP(6) is fixed for the statement, so
the clock is read once either way. */ -}}
INSERT INTO `{{.Name}}` (scope, idem_key, fingerprint, created_at, expires_at, token, lease_until)
VALUES (@scope, @key, @fingerprint, {{template "now"}},
	GREATEST({{template "now"}} + INTERVAL @retention_us MICROSECOND, {{template "now"}} + INTERVAL @lease_us MICROSECOND),
	0, {{template "now"}} + INTERVAL @lease_us MICROSECOND)
