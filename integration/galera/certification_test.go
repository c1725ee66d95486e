package galera_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	mysqldriver "github.com/go-sql-driver/mysql"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/conformance"
	"github.com/idemkit/idem/dialect"
	"github.com/idemkit/idem/mysql"
)

// Two requests with one key on two nodes at once: both claims win locally
// (a node does not see the other's uncommitted row), both functions run,
// both transactions reach COMMIT together. Certification lets the first
// write set ordered win; the other COMMIT fails with 1213. Do must retry
// that transaction, and the retry must replay the winner's response, so
// the key has exactly one effect.
func TestCertification(t *testing.T) {
	f := newFixture(t, "cert", 3*time.Minute)
	before := f.status("wsrep_local_cert_failures") + f.status("wsrep_local_bf_aborts")
	const keys = 12
	for k := range keys {
		key := fmt.Sprintf("race-%d", k)
		g := &gate{want: 2, open: make(chan struct{})}
		var commits commitLog
		var results [2]idem.Result
		var errs [2]error
		var wg sync.WaitGroup
		for i := range 2 {
			// n1 against n2, n2 against n3, n3 against n1.
			node := (k + i) % len(f.nodes)
			d := &gated{Driver: f.nodes[node], node: nodeName(node), gate: g, log: &commits}
			// A loser's retry replays once the winner's write set is
			// applied on its node, a few milliseconds after it lost;
			// until then the retry may conflict again.
			store := f.store(d, idem.Config{MaxAttempts: 10})
			wg.Go(func() {
				results[i], errs[i] = store.Do(f.ctx, request(key), f.work(key, d.node))
			})
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("key %s: Do %d: %v", key, i, err)
			}
		}
		won, replay := results[0], results[1]
		if won.Outcome != idem.Won {
			won, replay = replay, won
		}
		if won.Outcome != idem.Won || !won.Committed || replay.Outcome != idem.Replay {
			t.Fatalf("key %s: outcomes %v and %v, want one committed win and one replay", key, results[0].Outcome, results[1].Outcome)
		}
		if string(replay.Response.Body) != string(won.Response.Body) {
			t.Errorf("key %s: replayed %q, the winner answered %q", key, replay.Response.Body, won.Response.Body)
		}
		if n := f.effectCount(key); n != 1 {
			t.Errorf("key %s: %d effects, want exactly 1", key, n)
		}
		// The two first commits met at the gate: one committed, the other
		// failed certification at COMMIT (1213), and Do retried it.
		first := commits.first(2)
		failed := 0
		for _, c := range first {
			if c.err != nil {
				failed++
				var me *mysqldriver.MySQLError
				if !errors.As(c.err, &me) || me.Number != 1213 {
					t.Errorf("key %s: COMMIT on %s failed with %v, want error 1213 (certification failure)", key, c.node, c.err)
				}
			}
		}
		if len(first) != 2 || failed != 1 {
			t.Errorf("key %s: first commits %v, want two, exactly one failing certification", key, first)
		}
		t.Logf("key %s: %s won; commits %v", key, won.Response.Body, commits.all())
	}
	t.Logf("wsrep_local_cert_failures + wsrep_local_bf_aborts over the nodes: +%d for %d keys",
		f.status("wsrep_local_cert_failures")+f.status("wsrep_local_bf_aborts")-before, keys)
}

// gated is a node's driver whose transactions wait at COMMIT until the
// gate opens, and log how COMMIT went.
type gated struct {
	*mysql.Driver
	node string
	gate *gate
	log  *commitLog
}

func (d *gated) Begin(ctx context.Context, opts dialect.BeginOptions) (dialect.Tx[*sql.Tx], error) {
	tx, err := d.Driver.Begin(ctx, opts)
	if err != nil {
		return nil, err
	}
	return &conformance.WrappedTx[*sql.Tx]{Tx: tx, OnCommit: func(ctx context.Context, tx dialect.Tx[*sql.Tx]) error {
		d.gate.arrive()
		err := tx.Commit(ctx)
		d.log.add(d.node, err)
		return err
	}}, nil
}

// gate holds the first want arrivals until all of them arrived (or 10 s
// passed), then lets everyone through.
type gate struct {
	want int64
	n    atomic.Int64
	open chan struct{}
}

func (g *gate) arrive() {
	n := g.n.Add(1)
	if n > g.want {
		return
	}
	if n == g.want {
		close(g.open)
	}
	select {
	case <-g.open:
	case <-time.After(10 * time.Second):
	}
}

// commitLog records each COMMIT's node and error, in order.
type commitLog struct {
	mu      sync.Mutex
	commits []commit
}

type commit struct {
	node string
	err  error
}

func (c commit) String() string {
	if c.err == nil {
		return c.node + ": ok"
	}
	return c.node + ": " + c.err.Error()
}

func (l *commitLog) add(node string, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.commits = append(l.commits, commit{node, err})
}

func (l *commitLog) first(n int) []commit {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]commit(nil), l.commits[:min(n, len(l.commits))]...)
}

func (l *commitLog) all() []commit { return l.first(1 << 30) }
