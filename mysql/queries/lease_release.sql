{{/* Ends the lease now, keeping the work's state. */ -}}
UPDATE `{{.Name}}` SET lease_until = LEAST(created_at, {{template "now"}})
{{template "fenced"}}
