{{/* Puts the caller's lock_timeout back after a takeover. */}}
SELECT set_config('lock_timeout', current_setting('idem.saved_lock_timeout'), true)
