{{/*
Takes over an expired record: a fresh pending record under a new token. The
guard re-reads the row once its lock is this transaction's, so of two
claimers one wins.
*/}}
UPDATE "{{.Name}}" SET fingerprint = @fingerprint, status = NULL, header = NULL, body = NULL,
	created_at = {{template "now"}}, expires_at = {{template "now"}} + @retention_us::bigint * interval '1 microsecond',
	token = token + 1, lease_until = NULL, step = NULL, step_data = NULL
WHERE scope = @scope AND idem_key = @key AND expires_at <= {{template "now"}}
RETURNING true
