{{/*
A transaction-scoped advisory lock on the table's name: migrations of one
table run one at a time across processes.
*/}}
SELECT 1 FROM (SELECT pg_advisory_xact_lock(hashtext('idem migrate {{.Name}}'))) l
