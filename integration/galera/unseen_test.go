package galera_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/dialect"
)

// An abort no statement reports. The history check saw MariaDB Galera roll a
// claim's transaction back without any statement failing (about once in six
// runs of 300 operations): the session then runs outside any transaction
// and, with autocommit on, every later write commits on its own. The abort
// itself cannot be had on demand: an abort that meets an idle session is
// reported to its next command, even to a COM_STMT_CLOSE, which has no
// answer (wsrep-lib's keep_command_error passes it on). So the function
// here ends the transaction the way the node does, with a ROLLBACK nobody
// is told of, and then writes an effect with a plain statement. Without
// idem's guard that write commits on its own; with it the write is rolled
// back with the rest, and the caller learns that nothing committed:
//
//   - Do fails with ErrTxAborted (the function's 201 is not stored), and
//     the client's retry does the work once;
//   - Store.Claim in a transaction of Driver.Begin: Complete fails with
//     ErrTxAborted (roll back and retry), nothing committed;
//   - a stale lease holder's RecordStep with a function, after another node
//     took the lease over (n2 not having applied that yet): nothing
//     committed, and the retry finds the lease lost;
//   - Store.Claim in a transaction begun with autocommit on is refused
//     before it writes anything.
//
// A transaction the applier aborts and a statement reports (1213) is
// TestClaimBehindApplier's.
func TestAbortUnseen(t *testing.T) {
	f := newFixture(t, "unseen", 3*time.Minute)
	hold := newApplierHold(t, f.cluster)

	// endsUnseen is the user's function: on its first run it ends the
	// transaction as the node's abort does, runs between (when not nil),
	// and writes an effect; on later runs it writes an effect only.
	endsUnseen := func(key string, ran *atomic.Int32, between func()) func(ctx context.Context, tx *sql.Tx) error {
		return func(ctx context.Context, tx *sql.Tx) error {
			if ran.Add(1) > 1 {
				return f.effect(ctx, tx, key, "n2r")
			}
			if _, err := tx.ExecContext(ctx, "ROLLBACK"); err != nil {
				return err
			}
			if between != nil {
				between()
			}
			return f.effect(ctx, tx, key, "n2a")
		}
	}

	t.Run("Do", func(t *testing.T) {
		req := request("unseen-do")
		onN2 := f.store(f.nodes[1], idem.Config{})
		var ran atomic.Int32
		work := endsUnseen(req.Key, &ran, nil)
		fn := func(ctx context.Context, tx *sql.Tx) (idem.Response, error) {
			if err := work(ctx, tx); err != nil {
				return idem.Response{}, err
			}
			return idem.Response{Status: 201, Body: []byte("created on n2")}, nil
		}
		res, err := onN2.Do(f.ctx, req, fn)
		if !errors.Is(err, idem.ErrTxAborted) || res.Committed {
			t.Errorf("Do on n2: %+v, %v; want ErrTxAborted, nothing committed", res, err)
		}
		f.wantEffects(t, req.Key)
		res, err = onN2.Do(f.ctx, req, fn)
		if err != nil || !res.Committed || ran.Load() != 2 {
			t.Errorf("the client's retry: %+v, %v (the function ran %d times); want the work done and committed", res, err, ran.Load())
		}
		f.wantEffects(t, req.Key, "n2r")
	})

	t.Run("ClaimInDriverTransaction", func(t *testing.T) {
		req := request("unseen-claim")
		d := f.nodes[1]
		onN2 := f.store(d, idem.Config{})
		tx, err := d.Begin(f.ctx, dialect.BeginOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(f.ctx)
		c, err := onN2.Claim(f.ctx, tx.Native(), req)
		if err != nil || c.Outcome != idem.Won {
			t.Fatalf("Claim on n2: %+v, %v", c, err)
		}
		var ran atomic.Int32
		if err := endsUnseen(req.Key, &ran, nil)(f.ctx, tx.Native()); err != nil {
			t.Fatalf("the work after the claim: %v", err)
		}
		err = c.Complete(f.ctx, idem.Response{Status: 201, Body: []byte("created on n2")})
		if !errors.Is(err, idem.ErrTxAborted) {
			t.Fatalf("Complete after the unseen end: %v; want ErrTxAborted (roll back and retry)", err)
		}
		if err := tx.Rollback(f.ctx); err != nil {
			t.Fatal(err)
		}
		f.wantEffects(t, req.Key)
		if rec, err := onN2.Lookup(f.ctx, req.Scope, req.Key); !errors.Is(err, idem.ErrNotFound) {
			t.Errorf("a record after the rollback: %+v, %v", rec, err)
		}
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
		// n2 applies the takeover once its transaction has ended.
		var ran atomic.Int32
		err = holder.RecordStep(f.ctx, "paid", nil, endsUnseen(req.Key, &ran, func() {
			release()
			waitFor(t, "n2 to apply the takeover", func() bool { return f.tokenOn(t, 1, req) == taker.Token() })
		}))
		if !errors.Is(err, idem.ErrLeaseLost) {
			t.Fatalf("the stale holder's RecordStep on n2: %v; want ErrLeaseLost", err)
		}
		f.wantEffects(t, req.Key)
		if _, err := taker.Complete(f.ctx, idem.Response{Status: 201, Body: []byte("created on n1")}, nil); err != nil {
			t.Fatalf("the taker's Complete: %v", err)
		}
	})

	t.Run("ClaimWithAutocommitRefused", func(t *testing.T) {
		req := request("unseen-autocommit")
		onN2 := f.store(f.nodes[1], idem.Config{})
		tx, err := f.nodes[1].DB().BeginTx(f.ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()
		_, err = onN2.Claim(f.ctx, tx, req)
		if !errors.Is(err, idem.ErrInvalidConfig) {
			t.Fatalf("Claim on n2 in a transaction with autocommit on: %v; want ErrInvalidConfig", err)
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

// tokenOn reads req's record's token on node i with a plain read.
func (f *fixture) tokenOn(t *testing.T, i int, req idem.Request) int64 {
	t.Helper()
	var token int64
	err := open(t, f.cluster.Nodes()[i], "").QueryRowContext(f.ctx, "SELECT token FROM "+f.table+" WHERE scope = ? AND idem_key = ?", req.Scope, req.Key).Scan(&token)
	if err != nil {
		t.Fatal(err)
	}
	return token
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
