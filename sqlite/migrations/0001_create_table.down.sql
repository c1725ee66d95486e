-- Undoes 0001_create_table: drops the records table (and its expiry
-- index with it).
DROP TABLE IF EXISTS "{{.Name}}";
