-- The records: a WITHOUT ROWID table clustered on (scope, idem_key), so a
-- claim writes two B-trees (with the expiry index), not three. Times are
-- INTEGER Unix microseconds (UTC). Keys and scopes compare with the BINARY
-- collation: byte for byte. A table created by an earlier version keeps its
-- rowid; every statement works on both.
CREATE TABLE IF NOT EXISTS "{{.Name}}" (
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

CREATE INDEX IF NOT EXISTS "{{.Index "expires"}}" ON "{{.Name}}" (expires_at);
