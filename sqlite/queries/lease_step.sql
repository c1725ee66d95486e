-- Stores a recovery point and extends the lease; returns its new end.
UPDATE "{{.Name}}" SET lease_until = {{template "now"}} + @lease_us, expires_at = MAX(expires_at, {{template "now"}} + @lease_us),
	step = @step, step_data = @step_data
{{template "fenced"}}
RETURNING lease_until
