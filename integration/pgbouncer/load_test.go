package pgbouncer_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/integration/containers"
	"github.com/idemkit/idem/integration/retryload"
)

// TestLoadWhileConnectionsDrop: 16 workers drive 300 intentions through
// PgBouncer with clients that retry, while every connection breaks three
// times: the pooler crashes (SIGKILL, started again on its port: clients
// and server connections dropped, transactions and COMMITs in flight
// included), or the server ends its sessions (pg_terminate_backend on every
// session PgBouncer holds).
// retryload checks one effect per intention with its record beside it,
// every unknown commit resolved, no key pending, every answer the stored
// one.
func TestLoadWhileConnectionsDrop(t *testing.T) {
	set := containers.PgBouncers(t)
	direct := pool(t, set.Server+"&application_name="+directApp, 4)
	for _, tc := range []struct {
		name     string
		bouncer  *containers.PgBouncer
		settings string
		drop     func(ctx context.Context, b *containers.PgBouncer) error
	}{
		{"1.26/cache-statement/pooler-crashes", set.New, "", func(ctx context.Context, b *containers.PgBouncer) error {
			return b.Crash(ctx)
		}},
		{"1.18/exec/server-terminates", set.Old, "&default_query_exec_mode=exec", func(ctx context.Context, _ *containers.PgBouncer) error {
			return terminateOnServer(ctx, direct)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			suffix := time.Now().UnixNano()
			table, effects := fmt.Sprintf("idem_load_%d", suffix), fmt.Sprintf("load_effects_%d", suffix)
			if _, err := direct.Exec(t.Context(), "CREATE TABLE "+effects+" (k text NOT NULL, nonce text NOT NULL)"); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _, _ = direct.Exec(context.Background(), "DROP TABLE IF EXISTS "+effects) })
			l := &retryload.Load[pgx.Tx]{
				// 20 ms of work per execution: the drops meet transactions
				// in flight, not idle server connections.
				Insert: func(ctx context.Context, tx pgx.Tx, key, nonce string) error {
					_, err := tx.Exec(ctx, "INSERT INTO "+effects+" (k, nonce) SELECT $1, $2 FROM pg_sleep(0.02)", key, nonce)
					return err
				},
				Effects: retryload.EffectsPgx(direct, effects),
				Fault: func(ctx context.Context) error {
					for i := range 3 {
						if i > 0 {
							time.Sleep(300 * time.Millisecond)
						}
						if err := tc.drop(ctx, tc.bouncer); err != nil {
							return err
						}
					}
					return nil
				},
			}
			l.Store, _ = newStore(t, set.Server, tc.bouncer.DSN+tc.settings, table, retryload.DefaultWorkers+2,
				idem.Config{CommitTimeout: 5 * time.Second, Observer: l.Observer()})
			if rep := l.Run(t); !rep.Struck() {
				t.Errorf("no call met a dropped connection: the fault did not strike")
			}
		})
	}
}

// console runs commands on b's admin console, one after the other, 100 ms
// apart.
func console(ctx context.Context, b *containers.PgBouncer, commands ...string) error {
	conn, err := pgx.Connect(ctx, b.Database("pgbouncer")+"&default_query_exec_mode=simple_protocol")
	if err != nil {
		return fmt.Errorf("PgBouncer %s console: %w", b.Version, err)
	}
	defer conn.Close(context.Background())
	for i, c := range commands {
		if i > 0 {
			time.Sleep(100 * time.Millisecond)
		}
		if _, err := conn.Exec(ctx, c); err != nil {
			return fmt.Errorf("PgBouncer %s console: %s: %w", b.Version, c, err)
		}
	}
	return nil
}

// directApp is the application_name of the test's own sessions on the
// server, which terminateOnServer spares.
const directApp = "idem-test-direct"

// terminateOnServer ends every session on the server but the test's own:
// those the poolers hold among them.
func terminateOnServer(ctx context.Context, direct *pgxpool.Pool) error {
	_, err := direct.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
WHERE backend_type = 'client backend' AND datname = 'idem' AND application_name <> $1`, directApp)
	return err
}
