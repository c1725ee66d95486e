{{/*
Stores the response on the pending record; a completed record lives at
least @retention_us microseconds after its completion. The claim set the
expiry a grace beyond that, so a completion within the grace leaves the
expiry as it is: no indexed column changes and the update stays HOT.
*/ -}}
UPDATE "{{.Name}}" SET status = @status, header = @header, body = @body,
	expires_at = GREATEST(expires_at, {{template "now"}} + @retention_us::bigint * interval '1 microsecond')
WHERE scope = @scope AND idem_key = @key AND fingerprint = @fingerprint AND status IS NULL
