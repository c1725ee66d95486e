-- idem schema version 1 (create_table) of table idempotency_keys on mysql, for golang-migrate.
-- Generated from the backend's migrations; do not edit. Regenerate with
--   go run github.com/idemkit/idem/cmd/idem migration-files -format golang-migrate -dialect mysql -table idempotency_keys -dir DIR
-- Up records version 1 in idempotency_keys_schema, as Store.Migrate does; down removes it.

DROP TABLE IF EXISTS `idempotency_keys`;

DROP TABLE IF EXISTS `idempotency_keys_schema`;
