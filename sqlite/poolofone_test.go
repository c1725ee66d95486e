package sqlite_test

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/sqlite"
)

// openPoolOfOne opens a database whose pool has one connection
// (db.SetMaxOpenConns(1), as ErrPrivateMemory recommends for ":memory:").
func openPoolOfOne(t *testing.T, name string) *sql.DB {
	t.Helper()
	if name != ":memory:" {
		name = filepath.Join(t.TempDir(), name)
	}
	db, err := sqlite.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	t.Cleanup(func() { db.Close() })
	return db
}

// TestPoolOfOneConnection: on a pool of one connection, nothing the store
// does waits for the connection its own call holds. A function that ends
// the transaction itself gets a TxEndedError that knows what happened (the
// key is read once the store's transaction gave its connection back, not
// while it holds it until the read gives up), and the rest of the
// lifecycle, lease mode included, runs through.
func TestPoolOfOneConnection(t *testing.T) {
	for _, name := range []string{"idem.db", ":memory:"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			// Far below the 5 s a read that waits for the connection
			// its own call holds takes to give up.
			ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
			defer cancel()
			d, err := sqlite.New(ctx, openPoolOfOne(t, name), sqlite.Options{})
			if err != nil {
				t.Fatal(err)
			}
			store, err := idem.New(d, idem.Config{ReadFirst: idem.ReadFirstAlways})
			if err != nil {
				t.Fatal(err)
			}
			if err := store.Migrate(ctx); err != nil {
				t.Fatal(err)
			}
			req := func(key string) idem.Request {
				return idem.Request{Scope: "tenant-1 POST /orders", Key: key, Fingerprint: idem.FingerprintRequest("POST", "/orders", nil)}
			}
			for _, commit := range []bool{true, false} {
				key := map[bool]string{true: "fn-commits", false: "fn-rolls-back"}[commit]
				_, err := store.Do(ctx, req(key), func(ctx context.Context, tx *sql.Tx) (idem.Response, error) {
					if commit {
						return idem.Response{Status: 201}, tx.Commit()
					}
					return idem.Response{Status: 201}, tx.Rollback()
				})
				var ended *idem.TxEndedError
				if !errors.As(err, &ended) {
					t.Fatalf("%s: Do = %v, want a *TxEndedError", key, err)
				}
				if ended.Unknown || ended.ClaimCommitted != commit {
					t.Fatalf("%s: %+v, want ClaimCommitted=%v and known: the key's read waited for the connection the store's own transaction held", key, ended, commit)
				}
			}
			ok := func(body string) idem.Func[*sql.Tx] {
				return func(context.Context, *sql.Tx) (idem.Response, error) {
					return idem.Response{Status: 201, Body: []byte(body)}, nil
				}
			}
			for i, want := range []idem.Outcome{idem.Won, idem.Replay} {
				res, err := store.Do(ctx, req("do"), ok("done"))
				if err != nil || res.Outcome != want {
					t.Fatalf("Do #%d: %+v, %v; want %v", i+1, res, err, want)
				}
			}
			res, err := store.DoLease(ctx, req("lease"), func(ctx context.Context, l *idem.Lease[*sql.Tx]) (idem.Response, error) {
				if err := l.RecordStep(ctx, "charged", []byte("ch_1"), func(ctx context.Context, tx *sql.Tx) error {
					_, err := tx.ExecContext(ctx, "SELECT 1")
					return err
				}); err != nil {
					return idem.Response{}, err
				}
				return idem.Response{Status: 201, Body: []byte("leased")}, nil
			})
			if err != nil || !res.Committed {
				t.Fatalf("DoLease: %+v, %v; want committed", res, err)
			}
			if _, err := store.Lookup(ctx, "tenant-1 POST /orders", "lease"); err != nil {
				t.Fatalf("Lookup: %v", err)
			}
			if err := store.Delete(ctx, "tenant-1 POST /orders", "do"); err != nil {
				t.Fatalf("Delete: %v", err)
			}
			if _, err := store.Purge(ctx); err != nil {
				t.Fatalf("Purge: %v", err)
			}
			if ctx.Err() != nil {
				t.Fatalf("the calls took until the test's deadline: %v", ctx.Err())
			}
		})
	}
}
