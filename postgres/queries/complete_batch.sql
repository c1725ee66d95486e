{{/*
Stores the responses of a batch's won keys, one element of each array per
key, as complete does for one key.
*/ -}}
UPDATE "{{.Name}}" AS r SET status = k.status, header = k.header, body = k.body,
	expires_at = GREATEST(r.expires_at, {{template "now"}} + @retention_us::bigint * interval '1 microsecond')
FROM unnest(@scopes::text[], @keys::text[], @fingerprints::bytea[], @statuses::smallint[], @headers::bytea[], @bodies::bytea[])
	AS k(scope, idem_key, fingerprint, status, header, body)
WHERE r.scope = k.scope AND r.idem_key = k.idem_key AND r.fingerprint = k.fingerprint AND r.status IS NULL
