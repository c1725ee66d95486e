{{/* The table of applied migrations: its version, name and time (Unix
microseconds). BEGIN IMMEDIATE already serialises writers, migrations
included, so it needs no lock of its own. */ -}}
CREATE TABLE IF NOT EXISTS "{{.Index "schema"}}" (
	version    INTEGER PRIMARY KEY,
	name       TEXT    NOT NULL,
	applied_at INTEGER NOT NULL
)
