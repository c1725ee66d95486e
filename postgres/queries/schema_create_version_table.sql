{{/* The applied migrations of the table. */}}
CREATE TABLE IF NOT EXISTS "{{.Index "schema"}}" (
	version    integer     PRIMARY KEY,
	name       text        NOT NULL,
	applied_at timestamptz NOT NULL DEFAULT statement_timestamp()
)
