-- idem schema version 1 (create_table) of table idempotency_keys on mysql, for goose.
-- Generated from the backend's migrations; do not edit. Regenerate with
--   go run github.com/idemkit/idem/cmd/idem migration-files -format goose -dialect mysql -table idempotency_keys -dir DIR
-- Up records version 1 in idempotency_keys_schema, as Store.Migrate does; down removes it.

-- +goose Up
CREATE TABLE IF NOT EXISTS `idempotency_keys_schema` (
	version    INT          NOT NULL PRIMARY KEY,
	name       VARCHAR(255) NOT NULL,
	applied_at DATETIME(6)  NOT NULL
) ENGINE=InnoDB;

CREATE TABLE IF NOT EXISTS `idempotency_keys` (
	scope       VARBINARY(255) NOT NULL,
	idem_key    VARBINARY(255) NOT NULL,
	fingerprint BINARY(32)     NOT NULL,
	status      SMALLINT       NULL,      -- NULL while pending
	header      MEDIUMBLOB     NULL,
	body        LONGBLOB       NULL,
	created_at  DATETIME(6)    NOT NULL,  -- UTC
	expires_at  DATETIME(6)    NOT NULL,  -- UTC
	PRIMARY KEY (scope, idem_key),
	KEY `idempotency_keys_expires` (expires_at)
) ENGINE=InnoDB;

INSERT INTO `idempotency_keys_schema` (version, name, applied_at) VALUES (1, 'create_table', UTC_TIMESTAMP(6)) ON DUPLICATE KEY UPDATE version = version;

-- +goose Down
DROP TABLE IF EXISTS `idempotency_keys`;

DROP TABLE IF EXISTS `idempotency_keys_schema`;
