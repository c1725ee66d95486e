{{/* MySQL, which has no SET STATEMENT (and whose SET_VAR hint does not
apply to InnoDB's variables): saves the session's lock wait timeout and sets
the claim's, @seconds. */ -}}
SET @`idem_saved_lock_wait` = @@SESSION.innodb_lock_wait_timeout,
	SESSION innodb_lock_wait_timeout = @seconds
