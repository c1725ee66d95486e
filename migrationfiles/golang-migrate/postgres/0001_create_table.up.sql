-- idem schema version 1 (create_table) of table idempotency_keys on postgres, for golang-migrate.
-- Generated from the backend's migrations; do not edit. Regenerate with
--   go run github.com/idemkit/idem/cmd/idem migration-files -format golang-migrate -dialect postgres -table idempotency_keys -dir DIR
-- Up records version 1 in idempotency_keys_schema, as Store.Migrate does; down removes it.

CREATE TABLE IF NOT EXISTS "idempotency_keys_schema" (
	version    integer     PRIMARY KEY,
	name       text        NOT NULL,
	applied_at timestamptz NOT NULL DEFAULT statement_timestamp()
);

CREATE TABLE IF NOT EXISTS "idempotency_keys" (
	scope       text COLLATE "C" NOT NULL,
	idem_key    text COLLATE "C" NOT NULL,
	fingerprint bytea       NOT NULL,
	status      smallint,            -- NULL while pending
	header      bytea,
	body        bytea,
	created_at  timestamptz NOT NULL,
	expires_at  timestamptz NOT NULL,
	PRIMARY KEY (scope, idem_key)
);

CREATE INDEX IF NOT EXISTS "idempotency_keys_expires" ON "idempotency_keys" (expires_at);

INSERT INTO "idempotency_keys_schema" (version, name) VALUES (1, 'create_table') ON CONFLICT (version) DO NOTHING;
