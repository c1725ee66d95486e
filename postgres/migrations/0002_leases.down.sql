-- Undoes 0002_leases: drops the lease columns and their index.
DROP INDEX IF EXISTS "{{.Index "lease"}}";
ALTER TABLE "{{.Name}}"
	DROP COLUMN IF EXISTS step_data,
	DROP COLUMN IF EXISTS step,
	DROP COLUMN IF EXISTS lease_until,
	DROP COLUMN IF EXISTS token;
