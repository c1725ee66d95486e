{{/*
After a batch claim: restores the caller's lock_timeout and reads the
records of the batch's keys (@scopes, @keys), the claim's own and those it
lost to. Always at least one row; one of NULLs when no key has a record.
*/}}
SELECT {{template "columns"}}
FROM (SELECT set_config('lock_timeout', current_setting('idem.saved_lock_timeout'), true) OFFSET 0) restored
LEFT JOIN (unnest(@scopes::text[], @keys::text[]) AS k(batch_scope, batch_key)
	JOIN "{{.Name}}" ON scope = k.batch_scope AND idem_key = k.batch_key) ON true
