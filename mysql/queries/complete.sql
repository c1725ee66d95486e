{{/* Stores the response on the in-flight record; the record lives
@retention_us after its completion. */ -}}
UPDATE `{{.Name}}` SET status = @status, header = @header, body = @body,
	expires_at = {{template "now"}} + INTERVAL @retention_us MICROSECOND
WHERE scope = @scope AND idem_key = @key AND fingerprint = @fingerprint AND status IS NULL
