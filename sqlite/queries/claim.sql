-- Claims a key in one transaction: inserts the pending record, or takes
-- over an expired one. The upsert's RETURNING yields a row only when this
-- statement wrote the record: a new key, or an expired one taken over.
INSERT INTO "{{.Name}}" AS r (scope, idem_key, fingerprint, status, header, body, created_at, expires_at)
VALUES (@scope, @key, @fingerprint, NULL, NULL, NULL, {{template "now"}}, {{template "now"}} + @retention_us)
ON CONFLICT (scope, idem_key) DO UPDATE SET
	fingerprint = excluded.fingerprint, status = NULL, header = NULL, body = NULL,
	created_at = excluded.created_at, expires_at = excluded.expires_at,
	token = r.token + 1, lease_until = NULL, step = NULL, step_data = NULL
WHERE r.expires_at <= excluded.created_at
RETURNING created_at
