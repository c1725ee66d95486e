{{/* The token floor, with a plain read: the latest committed floor,
taking no lock. */ -}}
SELECT COALESCE(MAX(max_deleted_token), 0) FROM `{{.Index "fence"}}` WHERE id = 1
