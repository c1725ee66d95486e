-- Reads the live record of a key.
SELECT {{template "columns"}}
FROM "{{.Name}}"
WHERE scope = @scope AND idem_key = @key AND expires_at > {{template "now"}}
