-- Stores the response on the pending record of this intention. A completed
-- record lives the retention after its completion.
UPDATE "{{.Name}}" SET status = @status, header = @header, body = @body,
	expires_at = {{template "now"}} + @retention_us
WHERE scope = @scope AND idem_key = @key AND fingerprint = @fingerprint AND status IS NULL
