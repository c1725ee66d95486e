-- Lease mode: the fencing token (0 for records claimed in one
-- transaction, 1 for a fresh lease, one more on every takeover), the
-- lease's end (NULL when the record holds no lease) and the last recovery
-- point. Adding columns with constant defaults rewrites no row. The partial
-- index serves the listing of expired leases.
ALTER TABLE "{{.Name}}"
	ADD COLUMN IF NOT EXISTS token       bigint NOT NULL DEFAULT 0,
	ADD COLUMN IF NOT EXISTS lease_until timestamptz,
	ADD COLUMN IF NOT EXISTS step        text COLLATE "C",
	ADD COLUMN IF NOT EXISTS step_data   bytea;

CREATE INDEX IF NOT EXISTS "{{.Index "lease"}}" ON "{{.Name}}" (lease_until) WHERE lease_until IS NOT NULL;
