{{/*
Takes over a record whose retention has passed, with a lease. The row is
visible to this statement's snapshot, so it was inserted after every delete
of the key's earlier records had committed, and the snapshot sees the floor
they raised.
*/}}
UPDATE "{{.Name}}" SET fingerprint = @fingerprint, status = NULL, header = NULL, body = NULL,
	created_at = {{template "now"}}, expires_at = GREATEST({{template "now"}} + @retention_us::bigint * interval '1 microsecond', {{template "now"}} + @lease_us::bigint * interval '1 microsecond'),
	token = GREATEST(token, {{template "floor" .}}) + 1, lease_until = {{template "now"}} + @lease_us::bigint * interval '1 microsecond', step = NULL, step_data = NULL
WHERE scope = @scope AND idem_key = @key AND expires_at <= {{template "now"}}
