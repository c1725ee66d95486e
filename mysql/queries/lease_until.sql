{{/* The holder's lease end after an extension: the row is locked by the
UPDATE before it, so this reads that UPDATE's value. */ -}}
SELECT {{template "micros" "lease_until"}} FROM `{{.Name}}`
{{template "fenced"}}
