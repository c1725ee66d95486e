-- Takes over a record whose retention has passed, with a new lease and a
-- token above both its own and the token floor.
UPDATE "{{.Name}}" SET fingerprint = @fingerprint, status = NULL, header = NULL, body = NULL,
	created_at = {{template "now"}}, expires_at = MAX({{template "now"}} + @retention_us, {{template "now"}} + @lease_us),
	token = MAX(token, {{template "floor" .}}) + 1,
	lease_until = {{template "now"}} + @lease_us, step = NULL, step_data = NULL
WHERE scope = @scope AND idem_key = @key AND expires_at <= {{template "now"}}
