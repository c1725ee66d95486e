-- Undoes 0002_leases: drops the lease columns and their index, in one
-- ALTER TABLE.
ALTER TABLE `{{.Name}}`
	DROP KEY `{{.Index "lease"}}`,
	DROP COLUMN step_data,
	DROP COLUMN step,
	DROP COLUMN lease_until,
	DROP COLUMN token;
