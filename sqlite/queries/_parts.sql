-- The parts the statements share. Times are INTEGER Unix microseconds
-- (UTC), as in the migrations.

-- now is the store's clock from @now, or the database's when @now is NULL.
-- SQLite keeps 'now' fixed for the whole of one statement.
{{define "now"}}COALESCE(@now, CAST(unixepoch('subsec') * 1000000 AS INTEGER)){{end}}

-- columns are the columns every read of a record returns, in the order
-- scanRecord reads them: the last says whether its lease is over.
{{define "columns"}}scope, idem_key, fingerprint, status, header, body, created_at, expires_at, token, lease_until, step, step_data,
	lease_until IS NOT NULL AND lease_until <= {{template "now"}}{{end}}

-- floor is the table's token floor: the largest token a delete removed.
-- The write lock taken at BEGIN IMMEDIATE means no delete can commit
-- between a statement's read of the floor and its write, so it is read
-- inline.
{{define "floor"}}COALESCE((SELECT max_deleted_token FROM "{{.Index "fence"}}" WHERE id = 1), 0){{end}}

-- fenced is the condition of every write by a lease holder: the record is
-- still pending with the holder's token and intention. A record claimed in
-- one transaction holds no lease (lease_until NULL) and may carry a stale
-- holder's token: fenced writes never take it.
{{define "fenced"}}WHERE scope = @scope AND idem_key = @key AND token = @token
	AND fingerprint = @fingerprint AND status IS NULL AND lease_until IS NOT NULL{{end}}
