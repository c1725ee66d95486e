-- idem schema version 3 (fence) of table idempotency_keys on mysql, for golang-migrate.
-- Generated from the backend's migrations; do not edit. Regenerate with
--   go run github.com/idemkit/idem/cmd/idem migration-files -format golang-migrate -dialect mysql -table idempotency_keys -dir DIR
-- Up records version 3 in idempotency_keys_schema, as Store.Migrate does; down removes it.

DROP TABLE IF EXISTS `idempotency_keys_fence`;

DELETE FROM `idempotency_keys_schema` WHERE version = 3;
