{{/* Stamps the record this transaction just inserted above the token floor. */}}
UPDATE "{{.Name}}" SET token = GREATEST(token, {{template "floor" .}}) + 1
WHERE scope = @scope AND idem_key = @key
