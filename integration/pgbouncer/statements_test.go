package pgbouncer_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/integration/containers"
	"github.com/idemkit/idem/postgres"
)

// newStore is a store for table on a pool of maxConns connections through
// the pooler, the table migrated through the server itself (direct), so
// that the pooler sees only the requests. cfg.Table is set to table.
func newStore(t testing.TB, direct, through string, table string, maxConns int32, cfg idem.Config) (*idem.Store[pgx.Tx], *pgxpool.Pool) {
	t.Helper()
	ctx := t.Context()
	dp := pool(t, direct, 2)
	dd, err := postgres.New(ctx, dp, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ds, err := idem.New(dd, idem.Config{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	if err := ds.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = dp.Exec(context.Background(), `DROP TABLE IF EXISTS "`+table+`", "`+table+`_schema", "`+table+`_fence"`)
	})
	p := pool(t, through, maxConns)
	d, err := postgres.New(ctx, p, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Table = table
	s, err := idem.New(d, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s, p
}

// answer is a function that writes nothing and answers body.
func answer(body string) idem.Func[pgx.Tx] {
	return func(context.Context, pgx.Tx) (idem.Response, error) {
		return idem.Response{Status: 201, Body: []byte(body)}, nil
	}
}

func req(key string) idem.Request {
	return idem.Request{Scope: "t POST /orders", Key: key, Fingerprint: idem.FingerprintRequest("POST", "/orders", []byte(key))}
}

// TestStatementCacheWithoutTracking: pgx caches prepared statements per
// connection by default; behind PgBouncer 1.18 in transaction pooling mode
// (which does not track them) client connections share server connections
// (database idem_one has a pool of one), so a second client prepares what
// the first already did there (42P05): in postgres.New when the first ran
// the same statement, in Do when a fresh server connection (RECONNECT)
// served New. idem's error says what to set, is classified ErrInvalidConfig
// and not retried, and nothing is stored: the same request on a corrected
// pool does the work. PgBouncer 1.26 with max_prepared_statements serves
// every step.
func TestStatementCacheWithoutTracking(t *testing.T) {
	set := containers.PgBouncers(t)
	for _, tc := range []struct {
		bouncer *containers.PgBouncer
		fails   bool
	}{
		{set.Old, true},
		{set.New, false},
	} {
		t.Run(tc.bouncer.Version, func(t *testing.T) {
			// Behind a pool of one server connection a stuck call would
			// wait for PgBouncer's query_wait_timeout (120 s).
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			table := "idem_cache_" + strings.ReplaceAll(tc.bouncer.Version, ".", "_")
			dsn := tc.bouncer.Database("idem_one")
			first, _ := newStore(t, set.Server, dsn, table, 1, idem.Config{})

			// postgres.New on a second client connection.
			_, err := postgres.New(ctx, pool(t, dsn, 1), postgres.Options{})
			if tc.fails {
				wantAdvice(t, "postgres.New", tc.bouncer, err)
			} else if err != nil {
				t.Fatalf("postgres.New on a second connection: %v", err)
			}

			// Do on a third, whose New ran on a fresh server connection.
			if err := console(ctx, tc.bouncer, "RECONNECT idem_one"); err != nil {
				t.Fatal(err)
			}
			third, _ := newStore(t, set.Server, dsn, table, 1, idem.Config{})
			if res, err := first.Do(ctx, req("first"), answer("first")); err != nil || !res.Committed {
				t.Fatalf("first connection: %v, %v", res.Outcome, err)
			}
			res, err := third.Do(ctx, req("third"), answer("third"))
			if !tc.fails {
				if err != nil || !res.Committed {
					t.Fatalf("third connection: %v, %v", res.Outcome, err)
				}
				return
			}
			wantAdvice(t, "Do", tc.bouncer, err)
			// Nothing of the failed request is stored: the corrected
			// pool does the work.
			fixed, _ := newStore(t, set.Server, dsn+"&default_query_exec_mode=exec", table, 1, idem.Config{})
			res, err = fixed.Do(ctx, req("third"), answer("third, fixed"))
			if err != nil || !res.Committed || string(res.Response.Body) != "third, fixed" {
				t.Fatalf("with default_query_exec_mode=exec: %v %q, %v; want the work done", res.Outcome, res.Response.Body, err)
			}
		})
	}
}

// wantAdvice fails t unless err is a prepared statement mismatch that says
// what to set, classified ErrInvalidConfig and not retryable.
func wantAdvice(t *testing.T, what string, b *containers.PgBouncer, err error) {
	t.Helper()
	switch {
	case err == nil:
		t.Fatalf("%s: no error; PgBouncer %s does not track prepared statements, so pgx's cache should collide", what, b.Version)
	case !errors.Is(err, postgres.ErrPreparedStatements) || !errors.Is(err, idem.ErrInvalidConfig):
		t.Fatalf("%s: %v; want postgres.ErrPreparedStatements, classified ErrInvalidConfig", what, err)
	case idem.Retryable(err):
		t.Errorf("%s: %v is retryable; a configuration error is not", what, err)
	case !strings.Contains(err.Error(), "max_prepared_statements") || !strings.Contains(err.Error(), "default_query_exec_mode=exec"):
		t.Errorf("%s: %q does not say what to set", what, err)
	}
	t.Logf("%s: the error as a user sees it: %v", what, err)
}
