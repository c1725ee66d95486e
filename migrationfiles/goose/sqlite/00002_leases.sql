-- idem schema version 2 (leases) of table idempotency_keys on sqlite, for goose.
-- Generated from the backend's migrations; do not edit. Regenerate with
--   go run github.com/idemkit/idem/cmd/idem migration-files -format goose -dialect sqlite -table idempotency_keys -dir DIR
-- Up records version 2 in idempotency_keys_schema, as Store.Migrate does; down removes it.

-- +goose Up
CREATE TABLE IF NOT EXISTS "idempotency_keys_schema" (
	version    INTEGER PRIMARY KEY,
	name       TEXT    NOT NULL,
	applied_at INTEGER NOT NULL
);

ALTER TABLE "idempotency_keys" ADD COLUMN token INTEGER NOT NULL DEFAULT 0;

ALTER TABLE "idempotency_keys" ADD COLUMN lease_until INTEGER;

ALTER TABLE "idempotency_keys" ADD COLUMN step TEXT;

ALTER TABLE "idempotency_keys" ADD COLUMN step_data BLOB;

CREATE INDEX IF NOT EXISTS "idempotency_keys_lease" ON "idempotency_keys" (lease_until) WHERE lease_until IS NOT NULL;

INSERT OR IGNORE INTO "idempotency_keys_schema" (version, name, applied_at) VALUES (2, 'leases', CAST(unixepoch('subsec') * 1000000 AS INTEGER));

-- +goose Down
DROP INDEX IF EXISTS "idempotency_keys_lease";

ALTER TABLE "idempotency_keys" DROP COLUMN step_data;

ALTER TABLE "idempotency_keys" DROP COLUMN step;

ALTER TABLE "idempotency_keys" DROP COLUMN lease_until;

ALTER TABLE "idempotency_keys" DROP COLUMN token;

DELETE FROM "idempotency_keys_schema" WHERE version = 2;
