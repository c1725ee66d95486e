{{/* Takes over a pending record of the same fingerprint whose lease ended
within its retention, under a new token, keeping its steps. */ -}}
UPDATE `{{.Name}}` SET token = token + 1,
	lease_until = {{template "now"}} + INTERVAL @lease_us MICROSECOND,
	expires_at = GREATEST(expires_at, {{template "now"}} + INTERVAL @lease_us MICROSECOND)
WHERE scope = @scope AND idem_key = @key AND status IS NULL AND fingerprint = @fingerprint
	AND lease_until <= {{template "now"}} AND expires_at > {{template "now"}}
