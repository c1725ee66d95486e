-- idem schema version 3 (fence) of table idempotency_keys on postgres, for goose.
-- Generated from the backend's migrations; do not edit. Regenerate with
--   go run github.com/idemkit/idem/cmd/idem migration-files -format goose -dialect postgres -table idempotency_keys -dir DIR
-- Up records version 3 in idempotency_keys_schema, as Store.Migrate does; down removes it.

-- +goose Up
CREATE TABLE IF NOT EXISTS "idempotency_keys_schema" (
	version    integer     PRIMARY KEY,
	name       text        NOT NULL,
	applied_at timestamptz NOT NULL DEFAULT statement_timestamp()
);

CREATE TABLE IF NOT EXISTS "idempotency_keys_fence" (
	id                smallint PRIMARY KEY CHECK (id = 1),
	max_deleted_token bigint   NOT NULL
);

INSERT INTO "idempotency_keys_fence" (id, max_deleted_token) VALUES (1, 0) ON CONFLICT (id) DO NOTHING;

INSERT INTO "idempotency_keys_schema" (version, name) VALUES (3, 'fence') ON CONFLICT (version) DO NOTHING;

-- +goose Down
DROP TABLE IF EXISTS "idempotency_keys_fence";

DELETE FROM "idempotency_keys_schema" WHERE version = 3;
