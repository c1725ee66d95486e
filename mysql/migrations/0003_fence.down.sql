-- Undoes 0003_fence: drops the token floor.
DROP TABLE IF EXISTS `{{.Index "fence"}}`;
