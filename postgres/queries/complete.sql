{{/*
Stores the response on the pending record; a completed record lives
@retention_us microseconds after its completion.
*/ -}}
UPDATE "{{.Name}}" SET status = @status, header = @header, body = @body,
	expires_at = {{template "now"}} + @retention_us::bigint * interval '1 microsecond'
WHERE scope = @scope AND idem_key = @key AND fingerprint = @fingerprint AND status IS NULL
