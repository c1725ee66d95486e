-- Undoes 0002_leases: drops the lease columns and their index.
DROP INDEX IF EXISTS "{{.Index "lease"}}";
ALTER TABLE "{{.Name}}" DROP COLUMN step_data;
ALTER TABLE "{{.Name}}" DROP COLUMN step;
ALTER TABLE "{{.Name}}" DROP COLUMN lease_until;
ALTER TABLE "{{.Name}}" DROP COLUMN token;
