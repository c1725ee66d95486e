{{/*
Stores the response and ends the lease; the record lives @retention_us
microseconds after its completion.
*/}}
UPDATE "{{.Name}}" SET status = @status, header = @header, body = @body,
	expires_at = {{template "now"}} + @retention_us::bigint * interval '1 microsecond', lease_until = NULL {{template "fenced"}}
