{{/*
complete_batch, made to fail (division by zero) unless it updated a row for
every key (@count), so a pipeline that sends COMMIT after it stops before
the COMMIT.
*/}}
WITH completed AS ({{template "complete_batch.sql" .}} RETURNING 1)
SELECT 1 / (count(*) = @count)::int FROM completed
