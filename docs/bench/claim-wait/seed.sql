\set k random(1, 9000000000000000000)
BEGIN;
INSERT INTO idempotency_keys (scope, idem_key, fingerprint, created_at, expires_at) VALUES ('s', 'k' || :k, '\x00', statement_timestamp(), statement_timestamp() + 86460000000::bigint * interval '1 microsecond') ON CONFLICT (scope, idem_key) DO NOTHING RETURNING true;
COMMIT;
