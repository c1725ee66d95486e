// Package patroni_test runs idem on a Patroni cluster (three PostgreSQL
// nodes in synchronous mode, etcd, HAProxy routing to the leader through
// Patroni's REST API) under a load of retrying clients, through a planned
// switchover and through a failure of the leader's PostgreSQL.
package patroni_test

import (
	"context"
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
//
// A node that took the leader key waits promoteDelay before it promotes:
// Patroni's GET /primary answers 200 meanwhile, so HAProxy sends sessions
// to a server still in recovery, as a slow promotion does on a busy
// machine (it failed CI twice before idem retried a standby's refusal).
// Each phase with a promotion checks that calls met it.
func TestSwitchoverAndFailover(t *testing.T) {
	const promoteDelay = 5 * time.Second
	c := containers.StartPatroni(t, containers.PatroniOptions{PromoteDelay: promoteDelay})
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
				Effects: retryload.EffectsPgx(pool, effects),
				Marks:   map[string]error{"standby": postgres.ErrStandby},
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
			recovery := l.FaultBeside(t.Context(), func(ctx context.Context) error { return phase.fault(ctx, leader) })
			rep := l.Run(t)
			recovered := recovery(t)
			if phase.name == "leader-killed" {
				// The old leader rejoins as a replica.
				if err := c.Node(leader).Start(ctx); err != nil {
					t.Fatal(err)
				}
			}
			if !rep.Struck() {
				t.Errorf("no call met the %s", phase.name)
			}
			// A refusal Do retried on its own counts too: most are.
			if phase.name != "postmaster-killed" && rep.Errors["standby"]+rep.Retries["standby"] == 0 {
				t.Errorf("no call met the new leader before its promotion (%v of pre_promote): the %s did not test a standby's refusal",
					promoteDelay, phase.name)
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

// waitHealthy waits at most 2 minutes for c to be healthy (WaitHealthy).
func waitHealthy(ctx context.Context, c *containers.PatroniCluster) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	return c.WaitHealthy(ctx)
}
