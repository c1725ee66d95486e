{{/*
Inserts a pending record holding a lease of @lease_us microseconds unless
the key has one; it lives at least @retention_us and at least as long as
the lease. The token is stamped by lease_stamp_token once the row is this
transaction's: the INSERT's own snapshot may predate the commit of a delete
it waited for, and with it a raised floor.
*/}}
INSERT INTO "{{.Name}}" (scope, idem_key, fingerprint, created_at, expires_at, token, lease_until)
VALUES (@scope, @key, @fingerprint, {{template "now"}}, GREATEST({{template "now"}} + @retention_us::bigint * interval '1 microsecond', {{template "now"}} + @lease_us::bigint * interval '1 microsecond'), 0, {{template "now"}} + @lease_us::bigint * interval '1 microsecond')
ON CONFLICT (scope, idem_key) DO NOTHING
RETURNING true
