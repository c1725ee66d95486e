{{/* A batch claim's first statement: the records its keys have, with a
locking read that waits for the transactions holding them. The keys are a
derived table of batch_scope and batch_key that the dialect writes in place
of the comment below (one row per key); it is joined first, to the records
by primary key, so the read locks only the batch's rows. */ -}}
SELECT {{template "columns"}}
FROM /* keys */ AS k
STRAIGHT_JOIN `{{.Name}}` ON scope = k.batch_scope AND idem_key = k.batch_key
LOCK IN SHARE MODE
