{{/*
Saves the transaction's lock_timeout in a custom setting and sets the wait
bound (@wait), both for this transaction only: before a takeover.
*/}}
SELECT set_config('idem.saved_lock_timeout', current_setting('lock_timeout'), true),
	set_config('lock_timeout', @wait, true)
