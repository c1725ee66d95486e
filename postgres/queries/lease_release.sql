{{/* Ends the lease now (at the latest), keeping the work's state. */}}
UPDATE "{{.Name}}" SET lease_until = LEAST(created_at, {{template "now"}}) {{template "fenced"}}
