package galera_test

import (
	"context"
	"database/sql"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
)

// A node that has not yet applied a record another node committed must not
// answer "not found" for it. n2's applier is held (a session there holds
// FLUSH TABLES WITH READ LOCK, which pauses replication on a Galera node)
// while n1 completes a request; a plain read on n2 then misses the record.
// Store.Lookup and a ReadFirst retry on n2 must wait until n2 catches up and
// answer from the record: found, and a replay that does not run the
// function again.
func TestCausalReads(t *testing.T) {
	f := newFixture(t, "causal", 2*time.Minute)
	n2 := f.cluster.Nodes()[1]
	writer := f.store(f.nodes[0], idem.Config{})
	reader := f.store(f.nodes[1], idem.Config{ReadFirst: idem.ReadFirstAlways})
	req := request("causal-1")

	conn, err := open(t, n2, "").Conn(f.ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(f.ctx, "FLUSH TABLES WITH READ LOCK"); err != nil {
		t.Fatal(err)
	}
	locked := true
	unlock := func() {
		if locked {
			locked = false
			if _, err := conn.ExecContext(context.WithoutCancel(f.ctx), "UNLOCK TABLES"); err != nil {
				t.Errorf("UNLOCK TABLES on n2: %v", err)
			}
		}
	}
	defer unlock()

	res, err := writer.Do(f.ctx, req, f.work(req.Key, "n1"))
	if err != nil || !res.Committed {
		t.Fatalf("Do on n1: %+v, %v", res, err)
	}
	var plain int
	if err := open(t, n2, "").QueryRowContext(f.ctx, "SELECT COUNT(*) FROM "+f.table+" WHERE idem_key = ?", req.Key).Scan(&plain); err != nil {
		t.Fatal(err)
	}
	if plain != 0 {
		t.Fatal("n2 applied the record while its applier was held: this run cannot show a stale read")
	}

	type lookup struct {
		rec idem.Record
		err error
		at  time.Duration
	}
	begin := time.Now()
	lookups := make(chan lookup, 1)
	go func() {
		rec, err := reader.Lookup(f.ctx, req.Scope, req.Key)
		lookups <- lookup{rec, err, time.Since(begin)}
	}()
	var ran atomic.Int32
	replays := make(chan lookup, 1)
	go func() {
		res, err := reader.Do(f.ctx, req, func(ctx context.Context, tx *sql.Tx) (idem.Response, error) {
			ran.Add(1)
			return f.work(req.Key, "n2")(ctx, tx)
		})
		replays <- lookup{idem.Record{Completed: res.Outcome == idem.Replay, Response: res.Response}, err, time.Since(begin)}
	}()

	const held = time.Second
	select {
	case l := <-lookups:
		t.Fatalf("Lookup on n2 returned while n2 had not applied the record: %+v, %v", l.rec, l.err)
	case <-time.After(held):
	}
	unlock()

	for name, ch := range map[string]chan lookup{"Lookup": lookups, "Do with ReadFirst": replays} {
		select {
		case l := <-ch:
			if l.err != nil || !l.rec.Completed || string(l.rec.Response.Body) != "created on n1" {
				t.Errorf("%s on n2: %+v, %v; want n1's completed record", name, l.rec, l.err)
			}
			if l.at < held {
				t.Errorf("%s on n2 answered after %v, before n2 could apply the record", name, l.at)
			}
			t.Logf("%s on n2 answered after %v (n2 held for %v)", name, l.at.Round(time.Millisecond), held)
		case <-time.After(30 * time.Second):
			t.Fatalf("%s on n2 did not answer within 30 s of n2 resuming", name)
		}
	}
	if n := ran.Load(); n != 0 {
		t.Errorf("the function ran %d times on n2 for a completed key", n)
	}
	if n := f.effectCount(req.Key); n != 1 {
		t.Errorf("%d effects, want 1", n)
	}
}
