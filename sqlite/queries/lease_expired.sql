-- Lists up to @limit pending records whose lease is over within their
-- retention, the longest over first.
SELECT {{template "columns"}}
FROM "{{.Name}}"
WHERE lease_until IS NOT NULL AND lease_until <= {{template "now"}} AND status IS NULL AND expires_at > {{template "now"}}
ORDER BY lease_until LIMIT @limit
