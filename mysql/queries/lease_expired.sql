{{/* Up to @limit pending records whose lease ended within their retention. */ -}}
SELECT {{template "columns"}}
FROM `{{.Name}}`
WHERE lease_until <= {{template "now"}} AND status IS NULL AND expires_at > {{template "now"}}
ORDER BY lease_until LIMIT @limit
