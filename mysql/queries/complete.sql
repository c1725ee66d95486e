{{/* Stores the response on the in-flight record; the record lives at
least @retention_us after its completion. The claim set the expiry a grace
beyond that, so a completion within the grace leaves the expiry as it is
and InnoDB does not touch the expiry index. */ -}}
UPDATE `{{.Name}}` SET status = @status, header = @header, body = @body,
	expires_at = GREATEST(expires_at, {{template "now"}} + INTERVAL @retention_us MICROSECOND)
WHERE scope = @scope AND idem_key = @key AND fingerprint = @fingerprint AND status IS NULL
