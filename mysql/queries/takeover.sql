{{/* A claim of a key whose record has expired: the record starts afresh
under a new token. */ -}}
UPDATE `{{.Name}}` SET fingerprint = @fingerprint, status = NULL, header = NULL, body = NULL,
	created_at = {{template "now"}},
	expires_at = {{template "now"}} + INTERVAL @retention_us MICROSECOND,
	token = token + 1, lease_until = NULL, step = NULL, step_data = NULL
WHERE scope = @scope AND idem_key = @key AND expires_at <= {{template "now"}}
