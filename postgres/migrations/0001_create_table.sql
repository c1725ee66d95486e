-- The records. Keys and scopes are text COLLATE "C": byte order, byte
-- equality, whatever the database's collation. Times are timestamptz. The
-- completing UPDATE changes no indexed column, so it is a HOT update when
-- the row's page has room.
CREATE TABLE IF NOT EXISTS "{{.Name}}" (
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

CREATE INDEX IF NOT EXISTS "{{.Index "expires"}}" ON "{{.Name}}" (expires_at);
