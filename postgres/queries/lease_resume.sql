{{/*
Takes over a pending record whose lease ended within its retention, under
a new token, for @lease_us microseconds; the record lives at least as long.
*/}}
UPDATE "{{.Name}}" SET token = token + 1, lease_until = {{template "now"}} + @lease_us::bigint * interval '1 microsecond',
	expires_at = GREATEST(expires_at, {{template "now"}} + @lease_us::bigint * interval '1 microsecond')
WHERE scope = @scope AND idem_key = @key AND status IS NULL AND fingerprint = @fingerprint
	AND lease_until <= {{template "now"}} AND expires_at > {{template "now"}}
