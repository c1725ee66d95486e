// Package patroni_test runs idem on a Patroni cluster (three PostgreSQL
// nodes in synchronous mode, etcd, HAProxy routing to the leader through
// Patroni's REST API) under a load of retrying clients, through a planned
// switchover and through a failure of the leader's PostgreSQL.
package patroni_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/integration/containers"
	"github.com/idemkit/idem/integration/retryload"
	"github.com/idemkit/idem/postgres"
)

func TestMain(m *testing.M) { containers.Main(m) }

// TestSwitchoverAndFailover: 16 workers drive 300 intentions through
// HAProxy while Patroni switches the leader over to its synchronous
// standby; then 300 more while the leader's postmaster is killed (SIGKILL:
// Patroni restarts it in place); then 300 more while the leader's whole
// node is killed (Patroni with it: the others fail over once its key's TTL
// runs out). Each time retryload checks one effect per intention with its
// record beside it, every unknown commit resolved, no key pending, every
// answer the stored one; the test reports how long the cluster took from
// the fault to the first claim committed through HAProxy.
func TestSwitchoverAndFailover(t *testing.T) {
	c := containers.StartPatroni(t)
	ctx := t.Context()
	cfg, err := pgxpool.ParseConfig(c.DSN + "&connect_timeout=2")
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = retryload.DefaultWorkers + 4
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	d, err := postgres.New(ctx, pool, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}

	for _, phase := range []struct {
		name  string
		fault func(ctx context.Context, leader string) error
	}{
		{"switchover", func(ctx context.Context, leader string) error { return c.Switchover(ctx, leader) }},
		{"postmaster-killed", func(ctx context.Context, leader string) error { return c.Node(leader).KillPostmaster(ctx) }},
		{"leader-killed", func(ctx context.Context, leader string) error { return c.Node(leader).Kill(ctx) }},
	} {
		t.Run(phase.name, func(t *testing.T) {
			leader, err := waitHealthy(ctx, c)
			if err != nil {
				t.Fatal(err)
			}
			effects := "effects_" + phase.name[:6]
			if _, err := pool.Exec(ctx, "CREATE TABLE "+effects+" (k text NOT NULL, nonce text NOT NULL)"); err != nil {
				t.Fatal(err)
			}
			// 200 ms of work per execution: 16 transactions are always in
			// flight, and 300 intentions take about 4 s, longer than the
			// cluster takes to recover, so the load spans the fault.
			l := &retryload.Load[pgx.Tx]{
				FaultAfter: 50,
				Insert: func(ctx context.Context, tx pgx.Tx, key, nonce string) error {
					_, err := tx.Exec(ctx, "INSERT INTO "+effects+" (k, nonce) SELECT $1, $2 FROM pg_sleep(0.2)", key, nonce)
					return err
				},
				Effects: func(ctx context.Context) (map[string][]string, error) { return readEffects(ctx, pool, effects) },
			}
			l.Store, err = idem.New(d, idem.Config{Table: "idem_patroni", CommitTimeout: 5 * time.Second, Observer: l.Observer()})
			if err != nil {
				t.Fatal(err)
			}
			if err := l.Store.Migrate(ctx); err != nil {
				t.Fatal(err)
			}
			// The fault runs beside the load, which goes on meanwhile;
			// then the probe measures the time to the first commit.
			var recovered time.Duration
			var faultErr error
			done := make(chan struct{})
			var started atomic.Bool
			l.Fault = func(context.Context) error {
				started.Store(true)
				go func() {
					defer close(done)
					ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
					defer cancel()
					begin := time.Now()
					if faultErr = phase.fault(ctx, leader); faultErr == nil {
						recovered, faultErr = firstCommit(ctx, l.Store, begin)
					}
				}()
				return nil
			}
			rep := l.Run(t)
			if !started.Load() {
				t.Fatal("the load ended before its fault ran")
			}
			<-done // bounded: the fault runs on a context of 2 minutes
			if faultErr != nil {
				t.Fatalf("%s: %v", phase.name, faultErr)
			}
			if phase.name == "leader-killed" {
				// The old leader rejoins as a replica.
				if err := c.Node(leader).Start(ctx); err != nil {
					t.Fatal(err)
				}
			}
			if !rep.Struck() {
				t.Errorf("no call met the %s", phase.name)
			}
			now, err := waitHealthy(ctx, c)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("%s: leader %s before, %s after; first claim committed through HAProxy %v after the fault",
				phase.name, leader, now, recovered.Round(time.Millisecond))
			if phase.name != "postmaster-killed" && now == leader {
				t.Errorf("the %s left %s the leader", phase.name, leader)
			}
		})
	}
}

// firstCommit calls Do on fresh keys (of a scope of their own, writing
// nothing) every 50 ms until one commits, and returns the time from begin.
func firstCommit(ctx context.Context, s *idem.Store[pgx.Tx], begin time.Time) (time.Duration, error) {
	for i := 0; ; i++ {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		key := fmt.Sprintf("probe-%d-%d", begin.UnixNano(), i)
		res, err := s.Do(cctx, idem.Request{Scope: "probe", Key: key, Fingerprint: idem.FingerprintRequest("POST", "/probe", nil)},
			func(context.Context, pgx.Tx) (idem.Response, error) { return idem.Response{Status: 204}, nil })
		cancel()
		if err == nil && res.Committed {
			return time.Since(begin), nil
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("no claim committed through HAProxy since the fault %v ago: %w", time.Since(begin), ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// readEffects reads each key's nonces from table.
func readEffects(ctx context.Context, p *pgxpool.Pool, table string) (map[string][]string, error) {
	rows, err := p.Query(ctx, "SELECT k, nonce FROM "+table)
	if err != nil {
		return nil, err
	}
	m := map[string][]string{}
	var k, n string
	_, err = pgx.ForEachRow(rows, []any{&k, &n}, func() error {
		m[k] = append(m[k], n)
		return nil
	})
	return m, err
}

// waitHealthy waits at most 2 minutes for c to be healthy (WaitHealthy).
func waitHealthy(ctx context.Context, c *containers.PatroniCluster) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	return c.WaitHealthy(ctx)
}
