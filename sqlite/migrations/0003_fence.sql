-- Lease mode's token floor: the largest fencing token of any record
-- deleted from the table (by Purge or Store.Delete). A record that starts a
-- new intention gets a token above it, so a token never repeats for a key,
-- even after its record was deleted and the key claimed afresh. One row;
-- records deleted before this version are not counted.
CREATE TABLE IF NOT EXISTS "{{.Index "fence"}}" (
	id                INTEGER PRIMARY KEY CHECK (id = 1),
	max_deleted_token INTEGER NOT NULL
);

INSERT OR IGNORE INTO "{{.Index "fence"}}" (id, max_deleted_token) VALUES (1, 0);
