{{/* Whether the holder's record is there, after a fenced UPDATE that
changed nothing (go-sql-driver reports 0 rows then, unless the DSN sets
clientFoundRows). */ -}}
SELECT 1 FROM `{{.Name}}`
{{template "fenced"}}
