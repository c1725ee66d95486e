-- The records. Keys and scopes are VARBINARY: compared byte for byte,
-- whatever the connection's collation. Times are DATETIME(6) in UTC. The
-- expiry index is part of the table (MySQL has no CREATE INDEX IF NOT
-- EXISTS), so the migration is one atomic statement.
CREATE TABLE IF NOT EXISTS `{{.Name}}` (
	scope       VARBINARY(255) NOT NULL,
	idem_key    VARBINARY(255) NOT NULL,
	fingerprint BINARY(32)     NOT NULL,
	status      SMALLINT       NULL,      -- NULL while pending
	header      MEDIUMBLOB     NULL,
	body        LONGBLOB       NULL,
	created_at  DATETIME(6)    NOT NULL,  -- UTC
	expires_at  DATETIME(6)    NOT NULL,  -- UTC
	PRIMARY KEY (scope, idem_key),
	KEY `{{.Index "expires"}}` (expires_at)
) ENGINE=InnoDB;
