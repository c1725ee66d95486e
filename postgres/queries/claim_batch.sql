{{/*
Claims the keys of a batch at once: inserts the record of each key of
@scopes, @keys and @fingerprints (arrays of one length, sorted by scope and
key) unless it has one. The CTE, evaluated once before any row is inserted,
saves the caller's lock_timeout and sets the wait bound (@wait), so every
wait for a transaction holding one of the keys is bounded; peek_batch puts
the caller's back. The rows are inserted in the arrays' order, so two
batches sharing keys take their locks in the same order. RETURNING names
the keys this statement inserted; the others lost, or expired.
*/}}
WITH bounded AS MATERIALIZED (
	SELECT set_config('lock_timeout', @wait, true)
	FROM (SELECT set_config('idem.saved_lock_timeout', current_setting('lock_timeout'), true) OFFSET 0) saved
)
INSERT INTO "{{.Name}}" (scope, idem_key, fingerprint, created_at, expires_at)
SELECT k.scope, k.idem_key, k.fingerprint, {{template "now"}}, {{template "now"}} + @retention_us::bigint * interval '1 microsecond'
FROM bounded, unnest(@scopes::text[], @keys::text[], @fingerprints::bytea[]) WITH ORDINALITY AS k(scope, idem_key, fingerprint, n)
ORDER BY k.n
ON CONFLICT (scope, idem_key) DO NOTHING
RETURNING scope, idem_key
