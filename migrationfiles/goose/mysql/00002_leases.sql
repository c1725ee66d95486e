-- idem schema version 2 (leases) of table idempotency_keys on mysql, for goose.
-- Generated from the backend's migrations; do not edit. Regenerate with
--   go run github.com/idemkit/idem/cmd/idem migration-files -format goose -dialect mysql -table idempotency_keys -dir DIR
-- Up records version 2 in idempotency_keys_schema, as Store.Migrate does; down removes it.

-- +goose Up
CREATE TABLE IF NOT EXISTS `idempotency_keys_schema` (
	version    INT          NOT NULL PRIMARY KEY,
	name       VARCHAR(255) NOT NULL,
	applied_at DATETIME(6)  NOT NULL
) ENGINE=InnoDB;

ALTER TABLE `idempotency_keys`
	ADD COLUMN token       BIGINT         NOT NULL DEFAULT 0,
	ADD COLUMN lease_until DATETIME(6)    NULL,
	ADD COLUMN step        VARBINARY(255) NULL,
	ADD COLUMN step_data   MEDIUMBLOB     NULL,
	ADD KEY `idempotency_keys_lease` (lease_until);

INSERT INTO `idempotency_keys_schema` (version, name, applied_at) VALUES (2, 'leases', UTC_TIMESTAMP(6)) ON DUPLICATE KEY UPDATE version = version;

-- +goose Down
ALTER TABLE `idempotency_keys`
	DROP KEY `idempotency_keys_lease`,
	DROP COLUMN step_data,
	DROP COLUMN step,
	DROP COLUMN lease_until,
	DROP COLUMN token;

DELETE FROM `idempotency_keys_schema` WHERE version = 2;
