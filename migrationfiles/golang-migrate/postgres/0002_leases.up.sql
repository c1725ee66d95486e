-- idem schema version 2 (leases) of table idempotency_keys on postgres, for golang-migrate.
-- Generated from the backend's migrations; do not edit. Regenerate with
--   go run github.com/idemkit/idem/cmd/idem migration-files -format golang-migrate -dialect postgres -table idempotency_keys -dir DIR
-- Up records version 2 in idempotency_keys_schema, as Store.Migrate does; down removes it.

CREATE TABLE IF NOT EXISTS "idempotency_keys_schema" (
	version    integer     PRIMARY KEY,
	name       text        NOT NULL,
	applied_at timestamptz NOT NULL DEFAULT statement_timestamp()
);

ALTER TABLE "idempotency_keys"
	ADD COLUMN IF NOT EXISTS token       bigint NOT NULL DEFAULT 0,
	ADD COLUMN IF NOT EXISTS lease_until timestamptz,
	ADD COLUMN IF NOT EXISTS step        text COLLATE "C",
	ADD COLUMN IF NOT EXISTS step_data   bytea;

CREATE INDEX IF NOT EXISTS "idempotency_keys_lease" ON "idempotency_keys" (lease_until) WHERE lease_until IS NOT NULL;

INSERT INTO "idempotency_keys_schema" (version, name) VALUES (2, 'leases') ON CONFLICT (version) DO NOTHING;
