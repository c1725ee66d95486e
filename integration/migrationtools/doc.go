// Package migrationtools holds the tests that apply idem's migration files
// (package github.com/idemkit/idem/migrationfiles) with the real tools'
// Go APIs, pressly/goose and golang-migrate, on SQLite, PostgreSQL and
// MySQL/MariaDB, and then run the conformance suite on the tables they made.
// It lives in the integration module so that neither tool, nor their
// dependencies, reach the library's module graph.
package migrationtools
