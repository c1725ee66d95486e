-- Lease mode: the fencing token (0 for records claimed in one
-- transaction, 1 for a fresh lease, one more on every takeover), the
-- lease's end (UTC; NULL when the record holds no lease) and the last
-- recovery point, with an index for the listing of expired leases. One
-- ALTER TABLE, so the migration applies wholly or not at all.
ALTER TABLE `{{.Name}}`
	ADD COLUMN token       BIGINT         NOT NULL DEFAULT 0,
	ADD COLUMN lease_until DATETIME(6)    NULL,
	ADD COLUMN step        VARBINARY(255) NULL,
	ADD COLUMN step_data   MEDIUMBLOB     NULL,
	ADD KEY `{{.Index "lease"}}` (lease_until);
