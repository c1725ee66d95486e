SELECT RELEASE_LOCK('idem migrate {{.Name}}')
