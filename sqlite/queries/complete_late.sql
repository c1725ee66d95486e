-- The completion of work that ran past its claim's grace (complete matched
-- no row): stores the response and moves the expiry to the retention after
-- now, so a completed record lives the retention after its completion.
UPDATE "{{.Name}}" SET status = @status, header = @header, body = @body,
	expires_at = {{template "now"}} + @retention_us
WHERE scope = @scope AND idem_key = @key AND fingerprint = @fingerprint AND status IS NULL
