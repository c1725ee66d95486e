{{/*
Deletes up to @limit expired rows that no other transaction holds (FOR
UPDATE SKIP LOCKED), raises the token floor to the largest token among
them and returns how many it deleted.
*/}}
WITH gone AS (DELETE FROM "{{.Name}}" WHERE ctid = ANY (ARRAY(
	SELECT ctid FROM "{{.Name}}" WHERE expires_at <= {{template "now"}}
	LIMIT @limit FOR UPDATE SKIP LOCKED))
AND expires_at <= {{template "now"}}
RETURNING token),
{{template "raise_floor" .}}
