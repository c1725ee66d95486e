{{/* Gives the record this transaction holds a token above its own and the
token floor, @floor. */ -}}
UPDATE `{{.Name}}` SET token = GREATEST(token, @floor) + 1 WHERE scope = @scope AND idem_key = @key
