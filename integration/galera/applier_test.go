package galera_test

import (
	"context"
	"database/sql"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/dialect"
	"github.com/idemkit/idem/mysql"
)

// A request on n2 right after the same key completed on n1, while n2 has
// not yet applied n1's commit (n2's applier is held, see applierHold): n2's
// claim finds no record. What idem promises there:
//
//   - a claim in a transaction begun before n1's commit wins on n2, even
//     with every causal wait on (wsrep_sync_wait=15): the server waits for
//     nothing inside a transaction. Its work and Complete go through; the
//     COMMIT fails certification with 1213, classified ErrDeadlock, so the
//     win never commits, and a retry replays n1's response;
//   - Do on n2 without a causal wait also wins there and runs its function;
//     its COMMIT is refused the same way, Do retries and replays n1's
//     response: the key has one effect, but the function ran on n2 too;
//   - Do on n2 with wsrep_sync_wait=1 in the DSN waits at START TRANSACTION
//     until n2 has applied n1's commit, and replays without running the
//     function.
func TestClaimBehindApplier(t *testing.T) {
	f := newFixture(t, "behind", 3*time.Minute)
	n2 := f.cluster.Nodes()[1]
	winner := f.store(f.nodes[0], idem.Config{})
	hold := newApplierHold(t, f.cluster)
	const held = time.Second

	// commitOnN1 completes req on n1 while n2's applier is held, and checks
	// that n2 has not applied it.
	commitOnN1 := func(t *testing.T, req idem.Request) (release func()) {
		t.Helper()
		release = hold.on(t, 1)
		if res, err := winner.Do(f.ctx, req, f.work(req.Key, "n1")); err != nil || !res.Committed {
			t.Fatalf("Do on n1: %+v, %v", res, err)
		}
		var plain int
		if err := open(t, n2, "").QueryRowContext(f.ctx, "SELECT COUNT(*) FROM "+f.table+" WHERE idem_key = ?", req.Key).Scan(&plain); err != nil {
			t.Fatal(err)
		}
		if plain != 0 {
			t.Fatal("n2 applied n1's record while its applier was held: this run cannot show a claim behind it")
		}
		return release
	}
	// replays checks that store answers req with n1's response without
	// running the function, and that the key has one effect.
	replays := func(t *testing.T, store *idem.Store[*sql.Tx], req idem.Request) {
		t.Helper()
		var ran atomic.Int32
		res, err := store.Do(f.ctx, req, func(ctx context.Context, tx *sql.Tx) (idem.Response, error) {
			ran.Add(1)
			return f.work(req.Key, "n2")(ctx, tx)
		})
		if err != nil || res.Outcome != idem.Replay || string(res.Response.Body) != "created on n1" || ran.Load() != 0 {
			t.Errorf("Do on n2 afterwards: %v %q, %v (function ran %d times); want a replay of n1's response", res.Outcome, res.Response.Body, err, ran.Load())
		}
		if n := f.effectCount(req.Key); n != 1 {
			t.Errorf("%d effects, want 1", n)
		}
	}

	t.Run("ClaimInOpenTransaction", func(t *testing.T) {
		d := newDriver(t, n2, "wsrep_sync_wait=15", mysql.Options{})
		claimer := f.store(d, idem.Config{})
		req := request("behind-claim")
		tx, err := d.Begin(f.ctx, dialect.BeginOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(f.ctx)
		rows, err := tx.Query(f.ctx, "SELECT COUNT(*) FROM "+f.table)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
		}
		rows.Close()

		release := commitOnN1(t, req)
		defer release()
		cctx, cancel := context.WithTimeout(f.ctx, 10*time.Second)
		defer cancel()
		c, err := claimer.Claim(cctx, tx.Native(), req)
		if err != nil || c.Outcome != idem.Won {
			t.Fatalf("Claim on n2: %+v, %v; want a local win (n2 has not applied n1's record, and a statement in a transaction does not wait for it)", c, err)
		}
		if _, err := tx.Native().ExecContext(f.ctx, "INSERT INTO "+f.effects+" (k, node) VALUES (?, 'n2')", req.Key); err != nil {
			t.Fatalf("the work after the local win: %v", err)
		}
		if err := c.Complete(f.ctx, idem.Response{Status: 201, Body: []byte("created on n2")}); err != nil {
			t.Fatalf("Complete after the local win: %v", err)
		}
		time.AfterFunc(held, release)
		begin := time.Now()
		err = d.Dialect().Classify(tx.Commit(f.ctx))
		t.Logf("COMMIT on n2 of the local win: %v after %v (n2 held for %v)", err, time.Since(begin).Round(time.Millisecond), held)
		if !errors.Is(err, idem.ErrDeadlock) && !errors.Is(err, idem.ErrSerialization) {
			t.Fatalf("COMMIT on n2 of a claim won after n1 committed the key: %v; want a refusal classified ErrDeadlock or ErrSerialization", err)
		}
		replays(t, claimer, req)
	})

	for _, c := range []struct {
		name, params string
		// ranOnN2: the function runs on n2 (then its transaction is refused).
		ranOnN2 bool
	}{
		{"DoPlainBegin", "", true},
		{"DoCausalBegin", "wsrep_sync_wait=1", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			store := f.store(newDriver(t, n2, c.params, mysql.Options{}), idem.Config{ReadFirst: idem.ReadFirstNever})
			req := request("behind-" + c.name)
			release := commitOnN1(t, req)
			defer release()
			type result struct {
				res idem.Result
				err error
				at  time.Duration
			}
			var ran atomic.Int32
			done := make(chan result, 1)
			begin := time.Now()
			go func() {
				res, err := store.Do(f.ctx, req, func(ctx context.Context, tx *sql.Tx) (idem.Response, error) {
					ran.Add(1)
					return f.work(req.Key, "n2")(ctx, tx)
				})
				done <- result{res, err, time.Since(begin)}
			}()
			select {
			case r := <-done:
				t.Fatalf("Do on n2 answered while n2 had not applied n1's record: %+v, %v", r.res, r.err)
			case <-time.After(held):
			}
			release()
			var r result
			select {
			case r = <-done:
			case <-time.After(30 * time.Second):
				t.Fatal("Do on n2 did not answer within 30 s of n2 resuming")
			}
			t.Logf("Do on n2 answered after %v (n2 held for %v); the function ran %d times", r.at.Round(time.Millisecond), held, ran.Load())
			if r.err != nil || r.res.Outcome != idem.Replay || string(r.res.Response.Body) != "created on n1" {
				t.Errorf("Do on n2: %v %q, %v; want a replay of n1's response", r.res.Outcome, r.res.Response.Body, r.err)
			}
			if got := ran.Load() > 0; got != c.ranOnN2 {
				t.Errorf("the function ran %d times on n2; want it to run: %v", ran.Load(), c.ranOnN2)
			}
			if n := f.effectCount(req.Key); n != 1 {
				t.Errorf("%d effects, want 1", n)
			}
			replays(t, store, req)
		})
	}
}
