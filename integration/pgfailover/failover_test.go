// Package pgfailover_test runs idem through a PostgreSQL failover: a primary
// and a streaming standby (containers.StartPostgresReplication), a bounded
// load through a multi-host DSN (target_session_attrs=read-write), and the
// primary killed and the standby promoted in the middle of it.
package pgfailover_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/integration/containers"
	"github.com/idemkit/idem/postgres"
)

func TestMain(m *testing.M) { containers.Main(m) }

// Bounds of one run: nothing waits longer.
const (
	intentions    = 300
	workers       = 8
	failoverAfter = 100 // intentions done before the primary is killed
	runTimeout    = 3 * time.Minute
	doTimeout     = 10 * time.Second // one Do
	maxCalls      = 300              // Do calls for one intention
)

// With synchronous replication a commit the primary acknowledged is on the
// standby: every intention ends with exactly one effect, whatever happened
// to its calls. The standby's WAL receiver is stopped first, so that
// commits are waiting for it when the primary is killed: their outcome is
// unknown, Do reports ErrCommitUnknown, and the next call resolves each
// one, replaying the commits the standby received and doing the others'
// work once.
func TestFailoverSynchronous(t *testing.T) {
	r := containers.StartPostgresReplication(t, containers.ReplicationOptions{Synchronous: true})
	l := newLoad(t, r)
	l.run(func(ctx context.Context) error {
		if err := r.StopStandbyReceiver(ctx); err != nil {
			return err
		}
		l.release()
		waiting, err := l.syncRepWaiters(ctx)
		if err != nil {
			return err
		}
		t.Logf("standby's WAL receiver stopped: %d commits wait for it on the primary", waiting)
		return l.failover(ctx, true)
	})

	l.expectExactlyOnce()
	if l.unknown.Load() == 0 {
		t.Errorf("no commit had an unknown outcome, though commits were waiting for the standby when the primary died")
	}
	if l.lostAcked != 0 {
		t.Errorf("%d acknowledged commits were lost with synchronous replication", l.lostAcked)
	}
}

// With asynchronous replication the primary acknowledges a commit before
// the standby has it, so the last acknowledged commits can be lost with
// the primary: the effect and its record together, never one without the
// other. The client believed them done; when it retries them anyway (as
// one that did not see the answer would), each is done again, once.
func TestFailoverAsynchronous(t *testing.T) {
	r := containers.StartPostgresReplication(t, containers.ReplicationOptions{Synchronous: false})
	l := newLoad(t, r)
	l.run(func(ctx context.Context) error {
		l.release()
		return l.failover(ctx, false)
	})

	l.expectTogether()
	t.Logf("acknowledged commits lost with the primary: %d of %d", l.lostAcked, intentions)
	l.again()
	l.expectExactlyOnce()
}

// load is a bounded set of intentions, each a request whose work writes one
// effect row, driven by workers that call Do until it succeeds.
type load struct {
	t     *testing.T
	ctx   context.Context
	r     *containers.PostgresReplication
	pool  *pgxpool.Pool
	store *idem.Store[pgx.Tx]
	keys  []string

	done      atomic.Int64
	held      chan struct{} // closed by release: the rest of the keys may go
	once      sync.Once
	unknown   atomic.Int64 // ErrCommitUnknown returned
	mu        sync.Mutex
	errs      map[string]int // retryable errors by meaning
	resolved  map[string]int // how a call after an unknown commit ended
	acked     map[string]bool
	lostAcked int
}

func newLoad(t *testing.T, r *containers.PostgresReplication) *load {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), runTimeout)
	t.Cleanup(cancel)
	cfg, err := pgxpool.ParseConfig(r.MultiHost + "&connect_timeout=2")
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = workers + 2
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	d, err := postgres.New(ctx, pool, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	store, err := idem.New(d, idem.Config{Table: "idem_failover", CommitTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "CREATE TABLE failover_effects (k text NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	l := &load{t: t, ctx: ctx, r: r, pool: pool, store: store, held: make(chan struct{}),
		errs: map[string]int{}, resolved: map[string]int{}, acked: map[string]bool{}}
	for i := range intentions {
		l.keys = append(l.keys, fmt.Sprintf("order-%03d", i))
	}
	return l
}

func request(key string) idem.Request {
	return idem.Request{Scope: "tenant-1 POST /orders", Key: key, Fingerprint: idem.FingerprintRequest("POST", "/orders", []byte(key))}
}

func work(key string) idem.Func[pgx.Tx] {
	return func(ctx context.Context, tx pgx.Tx) (idem.Response, error) {
		if _, err := tx.Exec(ctx, "INSERT INTO failover_effects (k) VALUES ($1)", key); err != nil {
			return idem.Response{}, err
		}
		return idem.Response{Status: 201, Body: []byte(key)}, nil
	}
}

// run drives every intention to its end with the workers while failover
// runs, once failoverAfter intentions are done. Keys beyond the first
// failoverAfter+workers wait for failover to call release, so that the
// load cannot end before failover has set the stage (stopped the
// standby's receiver), however slowly that goes on a busy machine.
func (l *load) run(failover func(context.Context) error) {
	l.t.Helper()
	begin := time.Now()
	queue := make(chan string)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for key := range queue {
				l.drive(key)
			}
		})
	}
	var ferr error
	var fwg sync.WaitGroup
	fwg.Go(func() {
		defer l.release()
		for l.done.Load() < failoverAfter {
			select {
			case <-l.ctx.Done():
				ferr = l.ctx.Err()
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
		ferr = failover(l.ctx)
	})
	for i, key := range l.keys {
		if i == failoverAfter+workers {
			<-l.held
		}
		queue <- key
	}
	close(queue)
	wg.Wait()
	fwg.Wait()
	if ferr != nil {
		l.t.Fatalf("failover: %v", ferr)
	}
	l.t.Logf("%d intentions in %v: %d commits with an unknown outcome (resolved by the next call as %v); retryable errors %v",
		intentions, time.Since(begin).Round(time.Millisecond), l.unknown.Load(), l.resolved, l.errs)
}

// release lets run send the keys it held back for failover.
func (l *load) release() { l.once.Do(func() { close(l.held) }) }

// drive calls Do for key until it succeeds (Won and committed, or Replay),
// pausing briefly after a retryable error, within maxCalls calls and the
// run's time.
func (l *load) drive(key string) {
	unknown := false
	for call := 1; call <= maxCalls; call++ {
		ctx, cancel := context.WithTimeout(l.ctx, doTimeout)
		res, err := l.store.Do(ctx, request(key), work(key))
		cancel()
		if err == nil && (res.Committed || res.Outcome == idem.Replay) {
			l.mu.Lock()
			l.acked[key] = true
			if unknown {
				l.resolved[res.Outcome.String()]++
			}
			l.mu.Unlock()
			l.done.Add(1)
			return
		}
		switch {
		case err == nil:
			l.t.Errorf("key %s: Do returned %v without committing", key, res.Outcome)
			return
		case errors.Is(err, idem.ErrCommitUnknown):
			unknown = true
			l.unknown.Add(1)
		case !idem.Retryable(err) || l.ctx.Err() != nil:
			l.t.Errorf("key %s: call %d: %v", key, call, err)
			return
		}
		l.mu.Lock()
		l.errs[meaning(err)]++
		l.mu.Unlock()
		select {
		case <-l.ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
	l.t.Errorf("key %s: not done after %d calls", key, maxCalls)
}

// meaning names the meaning a retryable error carries.
func meaning(err error) string {
	for _, m := range []struct {
		name string
		err  error
	}{
		{"commit-unknown", idem.ErrCommitUnknown}, {"unavailable", idem.ErrUnavailable}, {"serialization", idem.ErrSerialization},
		{"deadlock", idem.ErrDeadlock}, {"lock-timeout", idem.ErrLockTimeout}, {"retries-exhausted", idem.ErrRetriesExhausted},
	} {
		if errors.Is(err, m.err) {
			return m.name
		}
	}
	return "other"
}

// syncRepWaiters waits (at most 10 s) until at least one session on the
// primary waits for the standby at COMMIT, and returns how many do.
func (l *load) syncRepWaiters(ctx context.Context) (int, error) {
	db, err := sql.Open("pgx", l.r.Primary+"&connect_timeout=2")
	if err != nil {
		return 0, err
	}
	defer db.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		var n int
		err := db.QueryRowContext(ctx, "SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'SyncRep'").Scan(&n)
		if err == nil && n > 0 {
			return n, nil
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("no commit waits for the stopped standby after 10 s (last error %v)", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// failover kills the primary, lets the standby's WAL receiver continue when
// it was stopped, and promotes the standby.
func (l *load) failover(ctx context.Context, stopped bool) error {
	killAt := time.Now()
	if err := l.r.KillPrimary(ctx); err != nil {
		return err
	}
	if stopped {
		if err := l.r.ContinueStandbyReceiver(ctx); err != nil {
			return err
		}
	}
	if err := l.r.Promote(ctx); err != nil {
		return err
	}
	l.t.Logf("primary killed after %d intentions; standby promoted %v later", l.done.Load(), time.Since(killAt).Round(time.Millisecond))
	return nil
}

// counts reads, on the new primary, each key's effects and whether its
// record is completed.
func (l *load) counts() (effects map[string]int, completed map[string]bool) {
	l.t.Helper()
	effects, completed = map[string]int{}, map[string]bool{}
	rows, err := l.pool.Query(l.ctx, "SELECT k, count(*) FROM failover_effects GROUP BY k")
	if err != nil {
		l.t.Fatal(err)
	}
	for rows.Next() {
		var k string
		var n int
		if err := rows.Scan(&k, &n); err != nil {
			l.t.Fatal(err)
		}
		effects[k] = n
	}
	if err := rows.Err(); err != nil {
		l.t.Fatal(err)
	}
	for _, key := range l.keys {
		rec, err := l.store.Lookup(l.ctx, request(key).Scope, key)
		switch {
		case err == nil:
			completed[key] = rec.Completed
		case !errors.Is(err, idem.ErrNotFound):
			l.t.Fatalf("key %s: Lookup: %v", key, err)
		}
	}
	return effects, completed
}

// expectExactlyOnce: every intention has exactly one effect and a
// completed record.
func (l *load) expectExactlyOnce() {
	l.t.Helper()
	effects, completed := l.counts()
	for _, key := range l.keys {
		if effects[key] != 1 || !completed[key] {
			l.t.Errorf("key %s: %d effects, record completed %v; want exactly one effect and its record", key, effects[key], completed[key])
		}
	}
}

// expectTogether: every intention has its effect and its record, or
// neither; it counts the acknowledged ones that have neither.
func (l *load) expectTogether() {
	l.t.Helper()
	effects, completed := l.counts()
	for _, key := range l.keys {
		switch {
		case effects[key] > 1:
			l.t.Errorf("key %s: %d effects", key, effects[key])
		case (effects[key] == 1) != completed[key]:
			l.t.Errorf("key %s: %d effects but record completed %v: an effect and its record must survive or be lost together", key, effects[key], completed[key])
		case effects[key] == 0 && l.acked[key]:
			l.lostAcked++
		}
	}
}

// again drives every intention once more, as clients that retry would,
// with fresh counts.
func (l *load) again() {
	l.t.Helper()
	l.done.Store(0)
	l.unknown.Store(0)
	l.errs, l.resolved = map[string]int{}, map[string]int{}
	l.run(func(context.Context) error { return nil })
}
