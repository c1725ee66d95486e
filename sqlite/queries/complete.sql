-- Stores the response on the pending record of this intention when its
-- expiry already reaches the retention past now: the claim set it a grace
-- beyond the retention, and a completion within the grace leaves it alone.
-- SQLite rewrites an index whose column an UPDATE sets, even to the same
-- value, so this statement does not name expires_at; complete_late does.
UPDATE "{{.Name}}" SET status = @status, header = @header, body = @body
WHERE scope = @scope AND idem_key = @key AND fingerprint = @fingerprint AND status IS NULL
	AND expires_at >= {{template "now"}} + @retention_us
