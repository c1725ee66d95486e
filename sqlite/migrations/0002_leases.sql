-- Lease mode: the fencing token (0 for records claimed in one
-- transaction, 1 for a fresh lease, one more on every takeover), the
-- lease's end (Unix microseconds; NULL when the record holds no lease) and
-- the last recovery point. The index serves the listing of expired leases.
ALTER TABLE "{{.Name}}" ADD COLUMN token INTEGER NOT NULL DEFAULT 0;
ALTER TABLE "{{.Name}}" ADD COLUMN lease_until INTEGER;
ALTER TABLE "{{.Name}}" ADD COLUMN step TEXT;
ALTER TABLE "{{.Name}}" ADD COLUMN step_data BLOB;
CREATE INDEX IF NOT EXISTS "{{.Index "lease"}}" ON "{{.Name}}" (lease_until) WHERE lease_until IS NOT NULL;
