{{/* Moves the holder's lease end to @lease_us from now; the record lives at
least as long. Single-table UPDATEs assign left to right: no assignment
here reads a column an earlier one set. */ -}}
UPDATE `{{.Name}}` SET lease_until = {{template "now"}} + INTERVAL @lease_us MICROSECOND,
	expires_at = GREATEST(expires_at, {{template "now"}} + INTERVAL @lease_us MICROSECOND)
{{template "fenced"}}
