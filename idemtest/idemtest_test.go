package idemtest_test

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemtest"
)

// TestNewSQLite: the store is ready (its schema current, Do stores and
// replays), carries the configuration it was given, and its database is the
// test's own: a second one does not see the first one's records, and both
// are closed once the test ends.
func TestNewSQLite(t *testing.T) {
	var first, second *idemtest.SQLite
	t.Run("use", func(t *testing.T) {
		first = idemtest.NewSQLite(t, idem.Config{WaitBound: 123 * time.Millisecond})
		second = idemtest.NewSQLite(t, idem.Config{})
		if got := first.Store.Config().WaitBound; got != 123*time.Millisecond {
			t.Errorf("WaitBound = %v, want the 123ms given", got)
		}
		v, err := first.Store.Version(t.Context())
		if err != nil || v.Current != v.Latest || v.Current == 0 {
			t.Fatalf("Version = %+v, %v; want a migrated table", v, err)
		}
		if _, err := os.Stat(first.Path); err != nil || first.Path == second.Path {
			t.Errorf("Path %q (%v), second %q: want two database files", first.Path, err, second.Path)
		}
		req := idem.Request{Scope: "t POST /orders", Key: "k", Fingerprint: idem.FingerprintRequest("POST", "/orders", nil)}
		runs := 0
		for range 2 {
			res, err := first.Store.Do(t.Context(), req, func(context.Context, *sql.Tx) (idem.Response, error) {
				runs++
				return idem.Response{Status: 201}, nil
			})
			if err != nil || res.Response.Status != 201 {
				t.Fatalf("Do = %+v, %v", res, err)
			}
		}
		if runs != 1 {
			t.Errorf("the work ran %d times, want once", runs)
		}
		if _, err := second.Store.Lookup(t.Context(), req.Scope, req.Key); !errors.Is(err, idem.ErrNotFound) {
			t.Errorf("Lookup in the second database = %v, want ErrNotFound: it has the first one's record", err)
		}
		var n int
		if err := first.DB.QueryRowContext(t.Context(), `SELECT count(*) FROM `+idem.DefaultTable).Scan(&n); err != nil || n != 1 {
			t.Errorf("DB: %d rows in %s (%v), want the one record", n, idem.DefaultTable, err)
		}
		if first.Driver.DB() != first.DB {
			t.Error("DB is not the database under Driver")
		}
	})
	for _, lite := range []*idemtest.SQLite{first, second} {
		if err := lite.DB.Ping(); err == nil {
			t.Errorf("%s is still open after its test ended", lite.Path)
		}
	}
}

// TestSQLiteDriver: the driver is on a fresh, empty database of its own,
// closed once the test ends.
func TestSQLiteDriver(t *testing.T) {
	var db *sql.DB
	t.Run("use", func(t *testing.T) {
		d := idemtest.SQLiteDriver(t)
		db = d.DB()
		store, err := idem.New(d, idem.Config{})
		if err != nil {
			t.Fatal(err)
		}
		v, err := store.Version(t.Context())
		if err != nil || v.Current != 0 {
			t.Fatalf("Version = %+v, %v; want an empty database", v, err)
		}
	})
	if err := db.Ping(); err == nil {
		t.Error("the database is still open after its test ended")
	}
}
