\set k random(1, 9000000000000000000)
BEGIN;
INSERT INTO idempotency_keys (scope, idem_key, fingerprint, created_at, expires_at) VALUES ('s', 'k' || :k, '\x00', now(), now() + interval '1 day') ON CONFLICT (scope, idem_key) DO NOTHING RETURNING idem_key;
UPDATE idempotency_keys SET status = 201, header = '\x00', body = '\x7b226f72646572223a317d' WHERE scope = 's' AND idem_key = 'k' || :k;
COMMIT;
