{{/* Takes over a record whose retention has passed: it starts afresh,
leased for @lease_us, and lives at least @retention_us and at least its
lease. Its token is stamped by lease_stamp_token. */ -}}
UPDATE `{{.Name}}` SET fingerprint = @fingerprint, status = NULL, header = NULL, body = NULL,
	created_at = {{template "now"}},
	expires_at = GREATEST({{template "now"}} + INTERVAL @retention_us MICROSECOND,
		{{template "now"}} + INTERVAL @lease_us MICROSECOND),
	lease_until = {{template "now"}} + INTERVAL @lease_us MICROSECOND, step = NULL, step_data = NULL
WHERE scope = @scope AND idem_key = @key AND expires_at <= {{template "now"}}
