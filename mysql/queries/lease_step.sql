{{/* Stores a recovery point and extends the holder's lease, as lease_extend. */ -}}
UPDATE `{{.Name}}` SET lease_until = {{template "now"}} + INTERVAL @lease_us MICROSECOND,
	expires_at = GREATEST(expires_at, {{template "now"}} + INTERVAL @lease_us MICROSECOND),
	step = @step, step_data = @step_data
{{template "fenced"}}
