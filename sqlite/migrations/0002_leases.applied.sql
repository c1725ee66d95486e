-- Whether 0002_leases is in place (one row when it is): SQLite's ALTER
-- TABLE ADD COLUMN has no IF NOT EXISTS, so running it again would fail.
SELECT 1 FROM pragma_table_info('{{.Name}}') WHERE name = 'token';
