package postgres_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/conformance"
	"github.com/idemkit/idem/dialect"
	"github.com/idemkit/idem/integration/commitcut"
	"github.com/idemkit/idem/integration/containers"
	"github.com/idemkit/idem/postgres"
)

// TestCommitOutcomeUnknown: when the connection breaks after COMMIT was
// sent, or the answer does not come within the store's commit timeout, Do
// reports ErrCommitUnknown (and does not retry on its own); a retry with the
// same key then replays or redoes the work, never both.
func TestCommitOutcomeUnknown(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cut := &commitcut.Cutter{}
	pool := commitcut.Pool(ctx, t, containers.Postgres(t), cut, 4)
	db := stdlib.OpenDBFromPool(pool)
	t.Cleanup(func() { db.Close() })

	pgxDriver, err := postgres.New(ctx, pool, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	sqlDriver, err := postgres.NewSQL(ctx, db, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, mode := range []struct {
		name              string
		writeFails, stall bool
	}{
		{name: "write-fails-after-send", writeFails: true},
		{name: "answer-lost"},
		// The commit timeout, not the caller, interrupts a COMMIT in flight.
		{name: "answer-stalls-past-commit-timeout", stall: true},
	} {
		t.Run(mode.name, func(t *testing.T) {
			cut.WriteFails.Store(mode.writeFails)
			cut.Stall.Store(mode.stall)
			t.Run("pgx", func(t *testing.T) { commitUnknown(ctx, t, pgxDriver, cut, mode.stall) })
			t.Run("database-sql", func(t *testing.T) { commitUnknown(ctx, t, sqlDriver, cut, mode.stall) })
		})
	}
}

// commitBreaker is a conformance.CommitBreaker on the test server.
func commitBreaker[TTx any](t *testing.T, driver func(*pgxpool.Pool) (dialect.Driver[TTx], error)) conformance.CommitBreaker[TTx] {
	return commitcut.Breaker(t, containers.Postgres(t), driver)
}

func commitUnknown[TTx any](ctx context.Context, t *testing.T, d dialect.Driver[TTx], cut *commitcut.Cutter, stall bool) {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	table := "idemcommit_" + hex.EncodeToString(b)
	effects := table + "_fx"
	store, err := idem.New(d, idem.Config{Table: table, CommitTimeout: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Pool().Exec(ctx, "CREATE TABLE "+effects+" (k text)"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, name := range []string{effects, table, table + "_schema", table + "_fence"} {
			if _, err := d.Pool().Exec(context.Background(), "DROP TABLE "+name); err != nil {
				t.Errorf("drop %s: %v", name, err)
			}
		}
	})
	req := idem.Request{Scope: "tenant-1 POST /orders", Key: "commit-cut", Fingerprint: idem.FingerprintRequest("POST", "/orders", nil)}
	calls := 0
	work := func(arm bool) idem.Func[TTx] {
		return func(ctx context.Context, tx TTx) (idem.Response, error) {
			calls++
			q, err := d.Wrap(tx)
			if err != nil {
				return idem.Response{}, err
			}
			if _, err := q.Exec(ctx, "INSERT INTO "+effects+" (k) VALUES ('x')"); err != nil {
				return idem.Response{}, err
			}
			cut.Armed.Store(arm)
			return idem.Response{Status: 201, Body: []byte("done")}, nil
		}
	}
	before := cut.Cuts.Load()
	_, doErr := store.Do(ctx, req, work(true))
	cut.Armed.Store(false)
	if got := cut.Cuts.Load() - before; got != 1 {
		t.Fatalf("the connection was cut %d times, want 1 (COMMIT not seen on the wire?)", got)
	}
	if doErr == nil {
		t.Fatalf("Do with the connection lost during COMMIT succeeded")
	}
	if calls != 1 {
		t.Fatalf("function ran %d times, want 1 (a failed commit is not retried by Do)", calls)
	}
	// Whatever was reported, a retry with the key replays or redoes the
	// work, never both.
	res, err := store.Do(ctx, req, work(false))
	if err != nil || (res.Outcome != idem.Replay && res.Outcome != idem.Won) || string(res.Response.Body) != "done" {
		t.Fatalf("retry after the lost commit: %+v, %v, want a replay or a redo", res, err)
	}
	var n int64
	rows, err := d.Pool().Query(ctx, "SELECT COUNT(*) FROM "+effects)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	if !rows.Next() || rows.Scan(&n) != nil || n != 1 {
		t.Fatalf("effects = %d, want exactly 1", n)
	}
	if !errors.Is(doErr, idem.ErrCommitUnknown) {
		t.Errorf("Do with the COMMIT's answer lost = %v, want ErrCommitUnknown", doErr)
	}
	if stall {
		return // Purge has no commit timeout of its own: its caller's context bounds it
	}
	// A purge batch's COMMIT (the plain commit path, with no completion
	// sent along) is reported the same way.
	before = cut.Cuts.Load()
	cut.Armed.Store(true)
	_, purgeErr := store.Purge(ctx)
	cut.Armed.Store(false)
	if got := cut.Cuts.Load() - before; got != 1 {
		t.Fatalf("the connection was cut %d times during Purge, want 1", got)
	}
	if !errors.Is(purgeErr, idem.ErrCommitUnknown) {
		t.Errorf("Purge with the connection lost during COMMIT = %v, want ErrCommitUnknown", purgeErr)
	}
}

// TestCommitContextEndedBeforeSend: a COMMIT whose context ended before it
// was sent is a known failure, as dialect.Tx.Commit promises: nothing was
// committed, and no driver reports it with an unknown outcome, also when a
// completion waits to go with the COMMIT.
func TestCommitContextEndedBeforeSend(t *testing.T) {
	pool, db := connect(t)
	pgxDriver, err := postgres.New(t.Context(), pool, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	sqlDriver, err := postgres.NewSQL(t.Context(), db, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	heldDriver, err := postgres.NewSQL(t.Context(), server.held, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, deferred := range []bool{false, true} {
		t.Run(fmt.Sprintf("deferred=%v", deferred), func(t *testing.T) {
			t.Run("pgx", func(t *testing.T) { commitAfterContextEnded(t, pgxDriver, deferred) })
			if !deferred {
				// Plain database/sql sends every statement at once: it
				// holds none for COMMIT.
				t.Run("database-sql", func(t *testing.T) { commitAfterContextEnded(t, sqlDriver, deferred) })
			}
			t.Run("hold-begin", func(t *testing.T) { commitAfterContextEnded(t, heldDriver, deferred) })
		})
	}
}

func commitAfterContextEnded[TTx any](t *testing.T, d dialect.Driver[TTx], deferred bool) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	table := "idemctxcommit_" + hex.EncodeToString(b)
	if _, err := d.Pool().Exec(ctx, "CREATE TABLE "+table+" (k text)"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := d.Pool().Exec(context.Background(), "DROP TABLE "+table); err != nil {
			t.Errorf("drop %s: %v", table, err)
		}
	})
	txCtx, end := context.WithCancel(ctx)
	defer end()
	tx, err := d.Begin(txCtx, dialect.BeginOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// BEGIN goes with the first statement: send one.
	if err := dialect.Pipeline(txCtx, tx, dialect.Statement{SQL: "INSERT INTO " + table + " (k) VALUES ('first')"}); err != nil {
		t.Fatal(err)
	}
	held := false
	if deferred {
		held = dialect.DeferToCommit(tx, dialect.Statement{SQL: "INSERT INTO " + table + " (k) VALUES ('with-commit')"})
		if !held {
			t.Fatal("the transaction does not hold statements for COMMIT")
		}
	}
	end()
	err = tx.Commit(txCtx)
	if err == nil {
		t.Fatalf("Commit on an ended context succeeded")
	}
	if got := d.Dialect().Classify(err); errors.Is(got, dialect.ErrCommitUnknown) {
		t.Errorf("Commit on a context that ended before COMMIT was sent: %v, want a known failure, not ErrCommitUnknown", got)
	}
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Commit on an ended context: %v, want it to match context.Canceled", err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Errorf("Rollback after the failed Commit: %v, want nil", err)
	}
	rows, err := d.Pool().Query(ctx, "SELECT COUNT(*) FROM "+table)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var n int64
	if !rows.Next() || rows.Scan(&n) != nil || n != 0 {
		t.Fatalf("rows = %d after a COMMIT that was never sent, want 0", n)
	}
}
