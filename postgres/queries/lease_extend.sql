{{/* Moves the lease's end to @lease_us from now and returns it. */}}
UPDATE "{{.Name}}" SET lease_until = {{template "now"}} + @lease_us::bigint * interval '1 microsecond',
	expires_at = GREATEST(expires_at, {{template "now"}} + @lease_us::bigint * interval '1 microsecond') {{template "fenced"}}
RETURNING lease_until
