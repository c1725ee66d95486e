-- idem schema version 2 (leases) of table idempotency_keys on mysql, for golang-migrate.
-- Generated from the backend's migrations; do not edit. Regenerate with
--   go run github.com/idemkit/idem/cmd/idem migration-files -format golang-migrate -dialect mysql -table idempotency_keys -dir DIR
-- Up records version 2 in idempotency_keys_schema, as Store.Migrate does; down removes it.

ALTER TABLE `idempotency_keys`
	DROP KEY `idempotency_keys_lease`,
	DROP COLUMN step_data,
	DROP COLUMN step,
	DROP COLUMN lease_until,
	DROP COLUMN token;

DELETE FROM `idempotency_keys_schema` WHERE version = 2;
