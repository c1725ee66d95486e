-- Whether 0002_leases is in place (one row when it is): its ALTER TABLE
-- commits on its own, so a crash before its version was recorded leaves
-- the columns there, and running it again would fail on the first one.
SELECT 1 FROM information_schema.columns
WHERE table_schema = DATABASE() AND table_name = '{{.Name}}' AND column_name = 'token';
