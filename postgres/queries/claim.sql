{{/*
Inserts the record unless the key has one. The subqueries save the
caller's lock_timeout and set the wait bound (@wait, such as '5000ms')
before the row is inserted, so a wait for a transaction holding the key is
bounded (OFFSET 0 keeps them from being merged into the outer query).
RETURNING, evaluated only for the inserted row, restores it; after a
conflict peek does. A completed record lives @retention_us microseconds.
*/}}
INSERT INTO "{{.Name}}" (scope, idem_key, fingerprint, created_at, expires_at)
SELECT @scope::text, @key::text, @fingerprint::bytea, {{template "now"}}, {{template "now"}} + @retention_us::bigint * interval '1 microsecond'
FROM (SELECT set_config('lock_timeout', @wait, true)
	FROM (SELECT set_config('idem.saved_lock_timeout', current_setting('lock_timeout'), true) OFFSET 0) saved
	OFFSET 0) bounded
ON CONFLICT (scope, idem_key) DO NOTHING
RETURNING set_config('lock_timeout', current_setting('idem.saved_lock_timeout'), true)
