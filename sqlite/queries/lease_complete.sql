-- Stores the response and ends the lease. A completed record lives the
-- retention after its completion.
UPDATE "{{.Name}}" SET status = @status, header = @header, body = @body,
	expires_at = {{template "now"}} + @retention_us, lease_until = NULL
{{template "fenced"}}
