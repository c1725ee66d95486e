-- idem schema version 1 (create_table) of table idempotency_keys on sqlite, for golang-migrate.
-- Generated from the backend's migrations; do not edit. Regenerate with
--   go run github.com/idemkit/idem/cmd/idem migration-files -format golang-migrate -dialect sqlite -table idempotency_keys -dir DIR
-- Up records version 1 in idempotency_keys_schema, as Store.Migrate does; down removes it.

CREATE TABLE IF NOT EXISTS "idempotency_keys_schema" (
	version    INTEGER PRIMARY KEY,
	name       TEXT    NOT NULL,
	applied_at INTEGER NOT NULL
);

CREATE TABLE IF NOT EXISTS "idempotency_keys" (
	scope       TEXT    NOT NULL,
	idem_key    TEXT    NOT NULL,
	fingerprint BLOB    NOT NULL,
	status      INTEGER,          -- NULL while pending
	header      BLOB,
	body        BLOB,
	created_at  INTEGER NOT NULL, -- Unix microseconds, UTC
	expires_at  INTEGER NOT NULL, -- Unix microseconds, UTC
	PRIMARY KEY (scope, idem_key)
) WITHOUT ROWID;

CREATE INDEX IF NOT EXISTS "idempotency_keys_expires" ON "idempotency_keys" (expires_at);

INSERT OR IGNORE INTO "idempotency_keys_schema" (version, name, applied_at) VALUES (1, 'create_table', CAST(unixepoch('subsec') * 1000000 AS INTEGER));
