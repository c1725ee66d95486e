{{/*
Stores a recovery point (@step, @step_data) and moves the lease's end to
@lease_us from now; returns the new end.
*/}}
UPDATE "{{.Name}}" SET lease_until = {{template "now"}} + @lease_us::bigint * interval '1 microsecond',
	expires_at = GREATEST(expires_at, {{template "now"}} + @lease_us::bigint * interval '1 microsecond'), step = @step, step_data = @step_data {{template "fenced"}}
RETURNING lease_until
