{{/* Raises the token floor to @token, the largest token a delete removed. */ -}}
UPDATE `{{.Index "fence"}}` SET max_deleted_token = @token WHERE id = 1 AND max_deleted_token < @token
