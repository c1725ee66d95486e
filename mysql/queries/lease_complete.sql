{{/* Stores the response and ends the lease; the record lives @retention_us
after its completion. */ -}}
UPDATE `{{.Name}}` SET status = @status, header = @header, body = @body,
	expires_at = {{template "now"}} + INTERVAL @retention_us MICROSECOND, lease_until = NULL
{{template "fenced"}}
