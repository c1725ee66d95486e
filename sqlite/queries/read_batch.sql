-- Reads the live records of the keys in @lost (a JSON array of [scope,
-- key]): the records a batch claim lost to.
SELECT {{template "columns"}}
FROM json_each(@lost) AS k
JOIN "{{.Name}}" ON scope = k.value ->> 0 AND idem_key = k.value ->> 1
WHERE expires_at > {{template "now"}}
