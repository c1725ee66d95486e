{{/*
Sets the wait bound (@wait) for the rest of a lease claim's transaction,
which is the core's own: nothing to save or restore.
*/}}
SELECT set_config('lock_timeout', @wait, true)
