{{/*
After a claim that lost: restores the caller's lock_timeout and reads the
record the claim lost to. Always one row; NULLs when there is no record.
The subquery's one column is set_config, so every other name is the
table's.
*/}}
SELECT {{template "columns"}}
FROM (SELECT set_config('lock_timeout', current_setting('idem.saved_lock_timeout'), true) OFFSET 0) restored
LEFT JOIN "{{.Name}}" ON scope = @scope AND idem_key = @key
