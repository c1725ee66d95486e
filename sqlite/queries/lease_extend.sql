-- Moves the lease's end; returns the new end.
UPDATE "{{.Name}}" SET lease_until = {{template "now"}} + @lease_us, expires_at = MAX(expires_at, {{template "now"}} + @lease_us)
{{template "fenced"}}
RETURNING lease_until
