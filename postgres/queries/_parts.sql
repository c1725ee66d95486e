{{/*
Parts the statements share. The clock is the store's (@now) or, when @now
is NULL, the database's: one value for the whole statement.
*/}}

{{define "now"}}COALESCE(@now::timestamptz, statement_timestamp()){{end}}

{{/*
The columns every read of a record returns, in the order scanColumns reads
them, with whether the record and its lease have ended by the clock.
*/}}
{{define "columns"}}scope, idem_key, fingerprint, status, header, body, created_at, expires_at, expires_at <= {{template "now"}}, token, lease_until, step, step_data, lease_until <= {{template "now"}}{{end}}

{{/*
The token floor: the largest token purge has deleted, so that a key's next
record starts above every token its earlier records handed out.
*/}}
{{define "floor"}}COALESCE((SELECT max_deleted_token FROM "{{.Index "fence"}}" WHERE id = 1), 0){{end}}

{{/*
The rest of a purge after its "gone AS (DELETE ... RETURNING token)": raises
the token floor to the largest token deleted and returns how many rows went.
The UPDATE matches no row (and locks none) when nothing deleted held a token
above the floor. raisingFloor in statements.go spells the same for the
admin's purge.
*/}}
{{define "raise_floor"}}raised AS (
	UPDATE "{{.Index "fence"}}" SET max_deleted_token = (SELECT max(token) FROM gone)
	WHERE id = 1 AND max_deleted_token < (SELECT max(token) FROM gone)
)
SELECT count(*) FROM gone{{end}}

{{/*
A lease's fence: the record is still this holder's pending lease.
*/}}
{{define "fenced"}}WHERE scope = @scope AND idem_key = @key AND token = @token AND fingerprint = @fingerprint AND status IS NULL AND lease_until IS NOT NULL{{end}}
