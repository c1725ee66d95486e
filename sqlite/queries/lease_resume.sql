-- Takes over a live pending record of this intention whose lease is over,
-- keeping its recovery point.
UPDATE "{{.Name}}" SET token = token + 1, lease_until = {{template "now"}} + @lease_us,
	expires_at = MAX(expires_at, {{template "now"}} + @lease_us)
WHERE scope = @scope AND idem_key = @key AND status IS NULL AND fingerprint = @fingerprint
	AND lease_until IS NOT NULL AND lease_until <= {{template "now"}} AND expires_at > {{template "now"}}
