{{/* Puts back the session's lock wait timeout lock_wait_set saved. */ -}}
SET SESSION innodb_lock_wait_timeout = @`idem_saved_lock_wait`
