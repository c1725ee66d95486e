package pgfailover_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/integration/containers"
	"github.com/idemkit/idem/postgres"
)

// TestStandbyRefusalIsRetried: a router that follows the primary can send a
// session to a server that is still in recovery (HAProxy on Patroni's
// GET /primary answers 200 once a node holds the leader key, before its
// promotion ends). Its refusal to write is "not the primary, for now": Do
// retries it and so can the client (ErrUnavailable, Retryable), on every
// transaction idem can see the connection of; and once the standby is
// promoted the same client's next call does the work, once. A READ ONLY
// transaction on a primary stays ErrReadOnly (the conformance suite's
// ReadOnlyTransaction).
func TestStandbyRefusalIsRetried(t *testing.T) {
	r := containers.StartPostgresReplication(t, containers.ReplicationOptions{})
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()

	// The tables are made on the primary; the standby replays them.
	primary, err := pgxpool.New(ctx, r.Primary)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(primary.Close)
	var version int
	if err := primary.QueryRow(ctx, "SELECT current_setting('server_version_num')::int").Scan(&version); err != nil {
		t.Fatal(err)
	}
	if version < 140000 {
		t.Skipf("PostgreSQL %d reports no in_hot_standby (14 and later do): a standby's refusal stays ErrReadOnly", version)
	}
	pd, err := postgres.New(ctx, primary, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	const table = "idem_standby"
	ps, err := idem.New(pd, idem.Config{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	if err := ps.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := primary.Exec(ctx, "CREATE TABLE failover_effects (k text NOT NULL)"); err != nil {
		t.Fatal(err)
	}

	standby, err := pgxpool.New(ctx, r.Standby+"&connect_timeout=2")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(standby.Close)
	if err := waitReplayed(ctx, standby, "failover_effects"); err != nil {
		t.Fatal(err)
	}
	cfg, err := pgx.ParseConfig(r.Standby)
	if err != nil {
		t.Fatal(err)
	}
	sqlDB := stdlib.OpenDB(*cfg)
	t.Cleanup(func() { _ = sqlDB.Close() })
	heldDB := sql.OpenDB(postgres.HoldBegin(stdlib.GetConnector(*cfg)))
	t.Cleanup(func() { _ = heldDB.Close() })

	pgxDriver, err := postgres.New(ctx, standby, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	pgxStore, err := idem.New(pgxDriver, idem.Config{Table: table, MaxAttempts: 2})
	if err != nil {
		t.Fatal(err)
	}
	sqlStore := func(db *sql.DB) *idem.Store[*sql.Tx] {
		d, err := postgres.NewSQL(ctx, db, postgres.Options{})
		if err != nil {
			t.Fatal(err)
		}
		s, err := idem.New(d, idem.Config{Table: table, MaxAttempts: 2})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	sqlS, heldS := sqlStore(sqlDB), sqlStore(heldDB)
	sqlWork := func(ctx context.Context, tx *sql.Tx) (idem.Response, error) {
		return idem.Response{Status: 201}, nil
	}

	for _, tc := range []struct {
		name string
		call func(ctx context.Context, req idem.Request) error
	}{
		{"pgx Do", func(ctx context.Context, req idem.Request) error {
			_, err := pgxStore.Do(ctx, req, work(req.Key))
			return err
		}},
		{"database/sql Do", func(ctx context.Context, req idem.Request) error {
			_, err := sqlS.Do(ctx, req, sqlWork)
			return err
		}},
		{"HoldBegin Do", func(ctx context.Context, req idem.Request) error {
			_, err := heldS.Do(ctx, req, sqlWork)
			return err
		}},
		{"pgx Purge", func(ctx context.Context, _ idem.Request) error {
			_, err := pgxStore.Purge(ctx)
			return err
		}},
		{"database/sql Purge", func(ctx context.Context, _ idem.Request) error {
			_, err := sqlS.Purge(ctx)
			return err
		}},
		{"HoldBegin Purge", func(ctx context.Context, _ idem.Request) error {
			_, err := heldS.Purge(ctx)
			return err
		}},
		{"pgx Claim in the caller's transaction", func(ctx context.Context, req idem.Request) error {
			tx, err := standby.Begin(ctx)
			if err != nil {
				return err
			}
			defer func() { _ = tx.Rollback(ctx) }()
			_, err = pgxStore.Claim(ctx, tx, req)
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call(ctx, request("standby-"+strings.ReplaceAll(tc.name, " ", "-")))
			switch {
			case err == nil:
				t.Fatal("a claim on a hot standby succeeded")
			case !errors.Is(err, idem.ErrUnavailable) || !errors.Is(err, postgres.ErrStandby) || !idem.Retryable(err):
				t.Errorf("got %v (ErrUnavailable %v, ErrStandby %v, Retryable %v), want a retryable ErrUnavailable and ErrStandby",
					err, errors.Is(err, idem.ErrUnavailable), errors.Is(err, postgres.ErrStandby), idem.Retryable(err))
			case errors.Is(err, idem.ErrReadOnly), errors.Is(err, idem.ErrBadTx):
				t.Errorf("got %v, which blames the transaction (ErrReadOnly, ErrBadTx): the server is a standby", err)
			case !strings.Contains(err.Error(), "hot standby"):
				t.Errorf("got %v, which does not say the server is a hot standby", err)
			}
		})
	}

	t.Run("pgx session closed", func(t *testing.T) {
		// A refused session is closed, not given back to the pool: behind
		// a router the next one goes where it points now.
		cfg, err := pgxpool.ParseConfig(r.Standby)
		if err != nil {
			t.Fatal(err)
		}
		cfg.MaxConns = 1
		pool, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer pool.Close()
		d, err := postgres.New(ctx, pool, postgres.Options{})
		if err != nil {
			t.Fatal(err)
		}
		s, err := idem.New(d, idem.Config{Table: table, MaxAttempts: 1})
		if err != nil {
			t.Fatal(err)
		}
		for i := range 3 {
			before := pool.Stat().NewConnsCount()
			key := fmt.Sprintf("standby-closed-%d", i)
			if _, err := s.Do(ctx, request(key), work(key)); !errors.Is(err, idem.ErrUnavailable) {
				t.Fatalf("call %d: %v, want ErrUnavailable", i, err)
			}
			// The refused session is closed: the next call dials anew.
			if i > 0 && pool.Stat().NewConnsCount() == before {
				t.Errorf("call %d ran on the session a standby had refused (%d sessions made in all)", i, before)
			}
		}
	})

	t.Run("promoted meanwhile", func(t *testing.T) {
		// A client calls until done, as retryload's do; the standby is
		// promoted after its first refusal.
		key := "standby-promoted"
		promoted := make(chan error, 1)
		started := false
		var refusals int
		for call := 1; ; call++ {
			if call > 200 || ctx.Err() != nil {
				t.Fatalf("not done after %d calls (%d refusals)", call-1, refusals)
			}
			res, err := pgxStore.Do(ctx, request(key), work(key))
			if err == nil && res.Committed {
				break
			}
			if err == nil || !idem.Retryable(err) {
				t.Fatalf("call %d: %v, %v: want a commit or a retryable error", call, res.Outcome, err)
			}
			refusals++
			if !started {
				started = true
				go func() { promoted <- r.Promote(ctx) }()
			}
			time.Sleep(50 * time.Millisecond)
		}
		if err := <-promoted; err != nil {
			t.Fatal(err)
		}
		var n int
		if err := standby.QueryRow(ctx, "SELECT count(*) FROM failover_effects WHERE k = $1", key).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != 1 {
			t.Errorf("%d effects, want 1", n)
		}
		t.Logf("done after %d refused calls", refusals)
	})
}

// waitReplayed waits, at most 30 s, until the standby has table.
func waitReplayed(ctx context.Context, pool *pgxpool.Pool, table string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		var found bool
		err := pool.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", table).Scan(&found)
		if err == nil && found {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the standby has no %s after 30 s: %v", table, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
