package postgres_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/dialect"
	"github.com/idemkit/idem/integration/containers"
	"github.com/idemkit/idem/postgres"
)

// TestPoolOfOneConnection: on a pool of one connection (pgxpool's
// pool_max_conns=1, db.SetMaxOpenConns(1)), nothing the store does waits
// for the connection its own call holds. A claim that waits out its bound
// reads the key once Do's transaction gave its connection back; in the
// caller's transaction (Store.Claim), which the store cannot end, that read
// waits at most the wait bound. A function that ends the transaction
// itself gets a TxEndedError that knows what happened.
func TestPoolOfOneConnection(t *testing.T) {
	shared, _ := connect(t)
	cfg, err := pgxpool.ParseConfig(containers.Postgres(t))
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = 1
	one, err := pgxpool.NewWithConfig(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(one.Close)
	db := stdlib.OpenDB(*cfg.ConnConfig)
	db.SetMaxOpenConns(1)
	t.Cleanup(func() { db.Close() })

	pgxDriver, err := postgres.New(t.Context(), one, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	sqlDriver, err := postgres.NewSQL(t.Context(), db, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	holder, err := postgres.New(t.Context(), shared, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Run("pgx", func(t *testing.T) {
		poolOfOne(t, holder, pgxDriver, func(ctx context.Context) (pgx.Tx, func(), error) {
			tx, err := one.Begin(ctx)
			return tx, func() { _ = tx.Rollback(context.Background()) }, err
		},
			func(ctx context.Context, tx pgx.Tx) error { return tx.Commit(ctx) })
	})
	t.Run("database-sql", func(t *testing.T) {
		poolOfOne(t, holder, sqlDriver, func(ctx context.Context) (*sql.Tx, func(), error) {
			tx, err := db.BeginTx(ctx, nil)
			return tx, func() { _ = tx.Rollback() }, err
		},
			func(_ context.Context, tx *sql.Tx) error { return tx.Commit() })
	})
}

func poolOfOne[TTx any](t *testing.T, holder *postgres.Driver, d dialect.Driver[TTx], begin func(context.Context) (TTx, func(), error), commit func(context.Context, TTx) error) {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	cfg := idem.Config{Table: "idemone_" + hex.EncodeToString(b), WaitBound: 300 * time.Millisecond}
	holders, err := idem.New(holder, cfg)
	if err != nil {
		t.Fatal(err)
	}
	store, err := idem.New(d, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := holders.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, name := range []string{cfg.Table, cfg.Table + "_schema", cfg.Table + "_fence"} {
			if _, err := holder.Pool().Exec(context.Background(), "DROP TABLE "+name); err != nil {
				t.Errorf("drop %s: %v", name, err)
			}
		}
	})
	req := func(key string) idem.Request {
		return idem.Request{Scope: "tenant-1 POST /orders", Key: key, Fingerprint: idem.FingerprintRequest("POST", "/orders", nil)}
	}
	// Another process holds the key: its claim is not committed.
	held, err := holder.DB().Begin(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer held.Rollback(context.Background())
	if c, err := holders.Claim(t.Context(), held, req("held")); err != nil || c.Outcome != idem.Won {
		t.Fatalf("the holder's claim: %+v, %v", c, err)
	}
	// Each call must answer long before its context ends: a read that
	// waits for the connection its own call holds waits until then.
	bounded := func(t *testing.T) context.Context {
		ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
		t.Cleanup(cancel)
		return ctx
	}
	t.Run("Do waits out its bound", func(t *testing.T) {
		ctx := bounded(t)
		res, err := store.Do(ctx, req("held"), func(context.Context, TTx) (idem.Response, error) {
			return idem.Response{}, errors.New("the function ran on a key another transaction holds")
		})
		if ctx.Err() != nil {
			t.Fatalf("Do returned only when its context ended (%v): it waited for the connection its own transaction held", ctx.Err())
		}
		if err != nil || res.Outcome != idem.InFlight {
			t.Fatalf("Do on a held key: %+v, %v; want InFlight", res, err)
		}
	})
	t.Run("Claim in the caller's transaction waits out its bound", func(t *testing.T) {
		ctx := bounded(t)
		tx, rollback, err := begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer rollback()
		c, err := store.Claim(ctx, tx, req("held"))
		if ctx.Err() != nil {
			t.Fatalf("Claim returned only when its context ended (%v): its read waited for the connection the caller's transaction holds", ctx.Err())
		}
		if err != nil || c.Outcome != idem.InFlight {
			t.Fatalf("Claim on a held key: %+v, %v; want InFlight", c, err)
		}
	})
	t.Run("function commits itself", func(t *testing.T) {
		ctx := bounded(t)
		_, err := store.Do(ctx, req("fn-commits"), func(ctx context.Context, tx TTx) (idem.Response, error) {
			return idem.Response{Status: 201}, commit(ctx, tx)
		})
		var ended *idem.TxEndedError
		if !errors.As(err, &ended) || ended.Unknown || !ended.ClaimCommitted {
			t.Fatalf("Do whose function committed: %v, want a TxEndedError with ClaimCommitted and known (%+v)", err, ended)
		}
	})
	t.Run("a claim that wins", func(t *testing.T) {
		ctx := bounded(t)
		res, err := store.Do(ctx, req("free"), func(context.Context, TTx) (idem.Response, error) {
			return idem.Response{Status: 201, Body: []byte("done")}, nil
		})
		if err != nil || !res.Committed {
			t.Fatalf("Do on a free key: %+v, %v; want committed", res, err)
		}
	})
}
