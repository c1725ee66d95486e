-- Deletes up to @limit expired records, returning each one's token for the
-- token floor (raise_floor).
DELETE FROM "{{.Name}}" WHERE (scope, idem_key) IN (
	SELECT scope, idem_key FROM "{{.Name}}" WHERE expires_at <= {{template "now"}} LIMIT @limit)
RETURNING token
