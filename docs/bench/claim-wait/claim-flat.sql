\set k random(1, 9000000000000000000)
BEGIN;
INSERT INTO idempotency_keys (scope, idem_key, fingerprint, created_at, expires_at) SELECT 's'::text, ('k' || :k)::text, '\x00'::bytea, COALESCE(NULL::timestamptz, statement_timestamp()), COALESCE(NULL::timestamptz, statement_timestamp()) + 86460000000::bigint * interval '1 microsecond' FROM (SELECT set_config('idem.saved_lock_timeout', current_setting('lock_timeout'), true), set_config('lock_timeout', '5000ms', true) OFFSET 0) bounded ON CONFLICT (scope, idem_key) DO NOTHING RETURNING set_config('lock_timeout', current_setting('idem.saved_lock_timeout'), true);
COMMIT;
