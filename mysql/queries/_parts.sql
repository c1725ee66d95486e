{{/*
The parts the statements share. Each statement file is one statement over
the table (a dialect.Table): {{.Name}} is its name, {{.Index "fence"}} its
token floor's. Parameters are @name; the Go call site binds each by name.
*/}}

{{- /* The store's clock: @now in Unix microseconds or, when that is NULL,
the database's. UTC_TIMESTAMP(6) is fixed for one statement. */ -}}
{{define "now"}}COALESCE(CAST('1970-01-01 00:00:00' AS DATETIME(6)) + INTERVAL @now MICROSECOND, UTC_TIMESTAMP(6)){{end}}

{{- /* A DATETIME(6) column (the dot) as Unix microseconds. */ -}}
{{define "micros"}}TIMESTAMPDIFF(MICROSECOND, CAST('1970-01-01 00:00:00' AS DATETIME(6)), {{.}}){{end}}

{{- /* The columns every read of a record returns, in the order scanRecord
reads them; the last is the read's clock, against which expiry and the
lease's end are judged. */ -}}
{{define "columns"}}scope, idem_key, fingerprint, status, header, body,
	{{template "micros" "created_at"}}, {{template "micros" "expires_at"}},
	token, {{template "micros" "lease_until"}}, step, step_data,
	TIMESTAMPDIFF(MICROSECOND, CAST('1970-01-01 00:00:00' AS DATETIME(6)), {{template "now"}}){{end}}

{{- /* The holder's record in lease mode: its key, its token and its
fingerprint, still pending and leased. */ -}}
{{define "fenced"}}WHERE scope = @scope AND idem_key = @key AND token = @token AND fingerprint = @fingerprint
	AND status IS NULL AND lease_until IS NOT NULL{{end}}
