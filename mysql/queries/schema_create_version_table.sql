CREATE TABLE IF NOT EXISTS `{{.Index "schema"}}` (
	version    INT          NOT NULL PRIMARY KEY,
	name       VARCHAR(255) NOT NULL,
	applied_at DATETIME(6)  NOT NULL
) ENGINE=InnoDB
