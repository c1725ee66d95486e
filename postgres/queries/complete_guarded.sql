{{/*
complete, made to fail (division by zero) when it updated no row, so a
pipeline that sends COMMIT after it stops before the COMMIT.
*/}}
WITH completed AS ({{template "complete.sql" .}} RETURNING 1)
SELECT 1 / count(*) FROM completed
