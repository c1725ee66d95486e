-- idem schema version 2 (leases) of table idempotency_keys on sqlite, for golang-migrate.
-- Generated from the backend's migrations; do not edit. Regenerate with
--   go run github.com/idemkit/idem/cmd/idem migration-files -format golang-migrate -dialect sqlite -table idempotency_keys -dir DIR
-- Up records version 2 in idempotency_keys_schema, as Store.Migrate does; down removes it.

DROP INDEX IF EXISTS "idempotency_keys_lease";

ALTER TABLE "idempotency_keys" DROP COLUMN step_data;

ALTER TABLE "idempotency_keys" DROP COLUMN step;

ALTER TABLE "idempotency_keys" DROP COLUMN lease_until;

ALTER TABLE "idempotency_keys" DROP COLUMN token;

DELETE FROM "idempotency_keys_schema" WHERE version = 2;
