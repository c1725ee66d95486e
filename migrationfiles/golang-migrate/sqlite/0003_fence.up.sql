-- idem schema version 3 (fence) of table idempotency_keys on sqlite, for golang-migrate.
-- Generated from the backend's migrations; do not edit. Regenerate with
--   go run github.com/idemkit/idem/cmd/idem migration-files -format golang-migrate -dialect sqlite -table idempotency_keys -dir DIR
-- Up records version 3 in idempotency_keys_schema, as Store.Migrate does; down removes it.

CREATE TABLE IF NOT EXISTS "idempotency_keys_schema" (
	version    INTEGER PRIMARY KEY,
	name       TEXT    NOT NULL,
	applied_at INTEGER NOT NULL
);

CREATE TABLE IF NOT EXISTS "idempotency_keys_fence" (
	id                INTEGER PRIMARY KEY CHECK (id = 1),
	max_deleted_token INTEGER NOT NULL
);

INSERT OR IGNORE INTO "idempotency_keys_fence" (id, max_deleted_token) VALUES (1, 0);

INSERT OR IGNORE INTO "idempotency_keys_schema" (version, name, applied_at) VALUES (3, 'fence', CAST(unixepoch('subsec') * 1000000 AS INTEGER));
