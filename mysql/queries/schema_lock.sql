{{/* A named lock of the session: migrations of one table run one at a time
across processes. DDL commits on its own here, so a transaction could not
hold a lock across it. */ -}}
SELECT GET_LOCK('idem migrate {{.Name}}', 60)
