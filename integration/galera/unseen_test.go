package galera_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	mysqldriver "github.com/go-sql-driver/mysql"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/dialect"
	"github.com/idemkit/idem/integration/containers"
)

// A transaction that ended without idem being told. n2 holds a transaction
// with a write to a key (a claim, or a lease holder's fenced write) that n1
// has also committed, while n2's applier is held; then the applier resumes
// and aborts n2's transaction. The function's next statement gets the 1213
// and the function goes on, as code that treats a statement as best effort
// does. Its session is now outside any transaction: with autocommit on, the
// function's next write commits on its own. The history check saw the same
// state with no statement told at all (MariaDB Galera rolling a claim's
// transaction back unreported, about once in six runs of 300 operations);
// that abort cannot be had on demand, but what follows it is the same.
// Without idem's guard the write stays and the key has two effects; with it
// the write is rolled back with the rest, and the caller learns that
// nothing committed:
//
//   - Do fails with ErrNotClaimed (its claim is gone; the function's 201
//     is not stored), and the client's retry replays n1's response;
//   - Store.Claim in a transaction of Driver.Begin: Complete fails with
//     ErrNotClaimed (roll back and retry), nothing of n2's committed;
//   - a stale lease holder's RecordStep with a function, after n1 took the
//     lease over: nothing committed, and the retry finds the lease lost;
//   - Store.Claim in a transaction the driver's Begin did not start is
//     refused before it writes anything.
func TestAbortUnseen(t *testing.T) {
	f := newFixture(t, "unseen", 3*time.Minute)
	n2 := f.cluster.Nodes()[1]
	hold := newApplierHold(t, f.cluster)
	onN1 := f.store(f.nodes[0], idem.Config{})

	// abortedBehind is the user's function on n2: on its first run it
	// resumes n2's applier, waits until it has aborted the transaction,
	// makes a best-effort statement (its 1213 is ignored) and writes an
	// effect; on later runs it writes an effect only.
	abortedBehind := func(t *testing.T, key string, ran *atomic.Int32, release func()) func(ctx context.Context, tx *sql.Tx) error {
		return func(ctx context.Context, tx *sql.Tx) error {
			if ran.Add(1) > 1 {
				return f.effect(ctx, tx, key, "n2r")
			}
			before := bfAborts(f.ctx, t, n2)
			release()
			waitFor(t, "n2's applier to abort the transaction", func() bool { return bfAborts(f.ctx, t, n2) > before })
			if _, err := tx.ExecContext(ctx, "DO 0"); !isDeadlock(err) {
				t.Fatalf("the statement after the abort: %v; want 1213 (the abort did not happen)", err)
			}
			return f.effect(ctx, tx, key, "n2a")
		}
	}

	t.Run("Do", func(t *testing.T) {
		req := request("unseen-do")
		onN2 := f.store(f.nodes[1], idem.Config{ReadFirst: idem.ReadFirstNever})
		release := f.completeOnN1Held(t, hold, onN1, req)
		var ran atomic.Int32
		work := abortedBehind(t, req.Key, &ran, release)
		fn := func(ctx context.Context, tx *sql.Tx) (idem.Response, error) {
			if err := work(ctx, tx); err != nil {
				return idem.Response{}, err
			}
			return idem.Response{Status: 201, Body: []byte("created on n2")}, nil
		}
		res, err := onN2.Do(f.ctx, req, fn)
		if !errors.Is(err, idem.ErrNotClaimed) || res.Committed {
			t.Errorf("Do on n2: %+v, %v; want ErrNotClaimed, nothing committed", res, err)
		}
		f.wantEffects(t, req.Key, "n1")
		res, err = onN2.Do(f.ctx, req, fn)
		if err != nil || res.Outcome != idem.Replay || string(res.Response.Body) != "created on n1" || ran.Load() != 1 {
			t.Errorf("the client's retry: %v %q, %v (the function ran %d times); want a replay of n1's response", res.Outcome, res.Response.Body, err, ran.Load())
		}
		f.wantEffects(t, req.Key, "n1")
	})

	t.Run("ClaimInDriverTransaction", func(t *testing.T) {
		req := request("unseen-claim")
		d := f.nodes[1]
		onN2 := f.store(d, idem.Config{})
		release := f.completeOnN1Held(t, hold, onN1, req)
		tx, err := d.Begin(f.ctx, dialect.BeginOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(f.ctx)
		c, err := onN2.Claim(f.ctx, tx.Native(), req)
		if err != nil || c.Outcome != idem.Won {
			t.Fatalf("Claim on n2: %+v, %v; want a local win (n2 has not applied n1's record)", c, err)
		}
		var ran atomic.Int32
		if err := abortedBehind(t, req.Key, &ran, release)(f.ctx, tx.Native()); err != nil {
			t.Fatalf("the work after the claim: %v", err)
		}
		err = c.Complete(f.ctx, idem.Response{Status: 201, Body: []byte("created on n2")})
		if !errors.Is(err, idem.ErrNotClaimed) {
			t.Errorf("Complete after the abort: %v; want ErrNotClaimed (roll back and retry)", err)
		}
		if err := tx.Rollback(f.ctx); err != nil {
			t.Fatal(err)
		}
		f.wantEffects(t, req.Key, "n1")
	})

	t.Run("StaleLeaseHolder", func(t *testing.T) {
		req := request("unseen-lease")
		cfg := idem.Config{Lease: 2 * time.Second, WaitBound: 400 * time.Millisecond, HolderWaitBound: 400 * time.Millisecond}
		holder, err := f.store(f.nodes[1], cfg).Lease(f.ctx, req)
		if err != nil || holder.Outcome != idem.Won {
			t.Fatalf("Lease on n2: %+v, %v", holder, err)
		}
		time.Sleep(2500 * time.Millisecond) // the lease ends; the holder goes on, stale
		release := hold.on(t, 1)
		defer release()
		taker, err := f.store(f.nodes[0], cfg).Resume(f.ctx, req.Scope, req.Key)
		if err != nil || taker.Outcome != idem.Won {
			t.Fatalf("Resume on n1 after the lease ended: %+v, %v", taker, err)
		}
		var ran atomic.Int32
		err = holder.RecordStep(f.ctx, "paid", nil, abortedBehind(t, req.Key, &ran, release))
		if !errors.Is(err, idem.ErrLeaseLost) {
			t.Fatalf("the stale holder's RecordStep on n2: %v; want ErrLeaseLost", err)
		}
		f.wantEffects(t, req.Key)
		if _, err := taker.Complete(f.ctx, idem.Response{Status: 201, Body: []byte("created on n1")}, nil); err != nil {
			t.Fatalf("the taker's Complete: %v", err)
		}
	})

	t.Run("ClaimOutsideDriverTransactionRefused", func(t *testing.T) {
		req := request("unseen-autocommit")
		onN2 := f.store(f.nodes[1], idem.Config{})
		tx, err := f.nodes[1].DB().BeginTx(f.ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		_, err = onN2.Claim(f.ctx, tx, req)
		if !errors.Is(err, idem.ErrInvalidConfig) {
			t.Fatalf("Claim on n2 in a transaction of the pool: %v; want ErrInvalidConfig", err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		if rec, err := onN2.Lookup(f.ctx, req.Scope, req.Key); !errors.Is(err, idem.ErrNotFound) {
			t.Errorf("the refused claim left a record: %+v, %v", rec, err)
		}
	})
}

// effect writes an effect row of key with a plain statement (its values
// written in), which go-sql-driver sends as text, without a prepare and
// a close.
func (f *fixture) effect(ctx context.Context, tx *sql.Tx, key, node string) error {
	_, err := tx.ExecContext(ctx, fmt.Sprintf("INSERT INTO %s (k, node) VALUES ('%s', '%s')", f.effects, key, node))
	return err
}

// wantEffects checks, reading causally, that key's committed effects were
// made on exactly the nodes named, in order.
func (f *fixture) wantEffects(t *testing.T, key string, nodes ...string) {
	t.Helper()
	rows, err := f.causal.QueryContext(f.ctx, "SELECT node FROM "+f.effects+" WHERE k = ? ORDER BY id", key)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var got []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		got = append(got, n)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != fmt.Sprint(nodes) {
		t.Errorf("effects of %s made on %v, want %v", key, got, nodes)
	}
}

// completeOnN1Held holds n2's applier, completes req on n1 and checks that
// n2 has not applied it; release resumes n2's applier.
func (f *fixture) completeOnN1Held(t *testing.T, hold *applierHold, onN1 *idem.Store[*sql.Tx], req idem.Request) (release func()) {
	t.Helper()
	release = hold.on(t, 1)
	if res, err := onN1.Do(f.ctx, req, f.work(req.Key, "n1")); err != nil || !res.Committed {
		release()
		t.Fatalf("Do on n1: %+v, %v", res, err)
	}
	var plain int
	if err := open(t, f.cluster.Nodes()[1], "").QueryRowContext(f.ctx, "SELECT COUNT(*) FROM "+f.table+" WHERE idem_key = ?", req.Key).Scan(&plain); err != nil {
		t.Fatal(err)
	}
	if plain != 0 {
		t.Fatal("n2 applied n1's record while its applier was held: this run cannot show a claim behind it")
	}
	return release
}

// bfAborts reads node's count of local transactions its applier aborted.
func bfAborts(ctx context.Context, t *testing.T, node *containers.GaleraNode) int64 {
	t.Helper()
	var name string
	var n int64
	if err := open(t, node, "").QueryRowContext(ctx, "SHOW STATUS LIKE 'wsrep_local_bf_aborts'").Scan(&name, &n); err != nil {
		t.Fatal(err)
	}
	return n
}

// isDeadlock reports whether err is MySQL's 1213.
func isDeadlock(err error) bool {
	var me *mysqldriver.MySQLError
	return errors.As(err, &me) && me.Number == 1213
}

// waitFor polls cond every 20 ms for at most 10 s, failing the test after.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after 10 s waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
