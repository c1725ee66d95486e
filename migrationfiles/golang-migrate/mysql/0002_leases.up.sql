-- idem schema version 2 (leases) of table idempotency_keys on mysql, for golang-migrate.
-- Generated from the backend's migrations; do not edit. Regenerate with
--   go run github.com/idemkit/idem/cmd/idem migration-files -format golang-migrate -dialect mysql -table idempotency_keys -dir DIR
-- Up records version 2 in idempotency_keys_schema, as Store.Migrate does; down removes it.

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
