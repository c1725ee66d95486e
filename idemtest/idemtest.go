// Package idemtest sets up what a test of code built on idem needs: a
// store on a fresh database, its table migrated, closed when the test ends.
// It is for tests only (it takes a testing.TB), as River's riverdbtest is.
//
//	func TestOrders(t *testing.T) {
//		lite := idemtest.NewSQLite(t, idem.Config{})
//		_, err := lite.DB.ExecContext(t.Context(), `CREATE TABLE orders (id INTEGER PRIMARY KEY)`)
//		...
//		res, err := lite.Store.Do(t.Context(), req, createOrder)
//	}
//
// Every test gets a database file of its own in tb.TempDir(), so tests run
// in parallel without seeing each other's records. The database is SQLite
// (pure Go, no server): what a test of a handler, middleware or consumer
// needs to run anywhere. Tests of a backend itself use package conformance.
package idemtest

import (
	"database/sql"
	"path/filepath"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/sqlite"
)

// SQLite is one test's SQLite database with idem's table migrated in it.
type SQLite struct {
	// Store is the store on Driver, configured by the cfg given to
	// NewSQLite, its table migrated.
	Store *idem.Store[*sql.Tx]
	// Driver is the backend under Store, for a second store with another
	// configuration on the same table.
	Driver *sqlite.Driver
	// DB is the database, for the test's own tables.
	DB *sql.DB
	// Path is the database file, for another connection or process.
	Path string
}

// NewSQLite opens a fresh SQLite database file in tb.TempDir(), builds a
// store on it with cfg (as idem.New does) and migrates the store's table.
// tb.Cleanup closes the database. A failure ends the test with tb.Fatal.
func NewSQLite(tb testing.TB, cfg idem.Config) *SQLite {
	tb.Helper()
	d, path := openSQLite(tb)
	store, err := idem.New(d, cfg)
	if err != nil {
		tb.Fatalf("idemtest: %v", err)
	}
	if err := store.Migrate(tb.Context()); err != nil {
		tb.Fatalf("idemtest: migrate: %v", err)
	}
	return &SQLite{Store: store, Driver: d, DB: d.DB(), Path: path}
}

// SQLiteDriver is the backend on a fresh SQLite database file in
// tb.TempDir(), with no store and no table yet: for a suite that builds its
// own stores, such as a conformance.Backend's Open. tb.Cleanup closes the
// database.
func SQLiteDriver(tb testing.TB) *sqlite.Driver {
	tb.Helper()
	d, _ := openSQLite(tb)
	return d
}

func openSQLite(tb testing.TB) (*sqlite.Driver, string) {
	tb.Helper()
	path := filepath.Join(tb.TempDir(), "idem.db")
	db, err := sqlite.Open(path)
	if err != nil {
		tb.Fatalf("idemtest: %v", err)
	}
	tb.Cleanup(func() { db.Close() })
	d, err := sqlite.New(tb.Context(), db, sqlite.Options{})
	if err != nil {
		tb.Fatalf("idemtest: %v", err)
	}
	return d, path
}
