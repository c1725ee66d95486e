-- Inserts a pending record holding a lease, unless the key has a record.
-- Its token is one above the token floor. Every write that sets
-- lease_until keeps expires_at >= lease_until.
INSERT INTO "{{.Name}}" (scope, idem_key, fingerprint, status, header, body, created_at, expires_at, token, lease_until)
VALUES (@scope, @key, @fingerprint, NULL, NULL, NULL, {{template "now"}},
	MAX({{template "now"}} + @retention_us, {{template "now"}} + @lease_us),
	{{template "floor" .}} + 1, {{template "now"}} + @lease_us)
ON CONFLICT (scope, idem_key) DO NOTHING
RETURNING token
