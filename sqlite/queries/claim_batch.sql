-- Claims the keys of a batch at once: inserts the pending record of each
-- element of @keys (a JSON array of [scope, key, fingerprint in hex]), or
-- takes over an expired one, as claim does for one key. RETURNING yields
-- the keys this statement wrote; the others lost. The WHERE of the SELECT
-- only tells SQLite's parser that ON CONFLICT belongs to the INSERT.
INSERT INTO "{{.Name}}" AS r (scope, idem_key, fingerprint, status, header, body, created_at, expires_at)
SELECT k.value ->> 0, k.value ->> 1, unhex(k.value ->> 2), NULL, NULL, NULL, {{template "now"}}, {{template "now"}} + @retention_us
FROM json_each(@keys) AS k
WHERE true
ON CONFLICT (scope, idem_key) DO UPDATE SET
	fingerprint = excluded.fingerprint, status = NULL, header = NULL, body = NULL,
	created_at = excluded.created_at, expires_at = excluded.expires_at,
	token = r.token + 1, lease_until = NULL, step = NULL, step_data = NULL
WHERE r.expires_at <= excluded.created_at
RETURNING scope, idem_key
