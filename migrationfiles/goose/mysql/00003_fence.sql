-- idem schema version 3 (fence) of table idempotency_keys on mysql, for goose.
-- Generated from the backend's migrations; do not edit. Regenerate with
--   go run github.com/idemkit/idem/cmd/idem migration-files -format goose -dialect mysql -table idempotency_keys -dir DIR
-- Up records version 3 in idempotency_keys_schema, as Store.Migrate does; down removes it.

-- +goose Up
CREATE TABLE IF NOT EXISTS `idempotency_keys_schema` (
	version    INT          NOT NULL PRIMARY KEY,
	name       VARCHAR(255) NOT NULL,
	applied_at DATETIME(6)  NOT NULL
) ENGINE=InnoDB;

CREATE TABLE IF NOT EXISTS `idempotency_keys_fence` (
	id                TINYINT NOT NULL PRIMARY KEY,
	max_deleted_token BIGINT  NOT NULL
) ENGINE=InnoDB;

INSERT IGNORE INTO `idempotency_keys_fence` (id, max_deleted_token) VALUES (1, 0);

INSERT INTO `idempotency_keys_schema` (version, name, applied_at) VALUES (3, 'fence', UTC_TIMESTAMP(6)) ON DUPLICATE KEY UPDATE version = version;

-- +goose Down
DROP TABLE IF EXISTS `idempotency_keys_fence`;

DELETE FROM `idempotency_keys_schema` WHERE version = 3;
