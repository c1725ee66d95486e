// Package cli holds the end-to-end tests of the idem command
// (github.com/idemkit/idem/cmd/idem): they build the binary with go build
// and run it as a subprocess against SQLite and the PostgreSQL and
// MySQL/MariaDB servers of package containers.
package cli
