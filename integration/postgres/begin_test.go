package postgres_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/dialect"
	"github.com/idemkit/idem/postgres"
)

// TestBeginIsolation: transactions run at the configured level unless a
// call asks for another (purge batches and migrations ask for READ
// COMMITTED); a level PostgreSQL lacks is refused.
func TestBeginIsolation(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool, db := connect(t)
	want := map[sql.IsolationLevel]string{
		sql.LevelReadCommitted:  "read committed",
		sql.LevelRepeatableRead: "repeatable read",
		sql.LevelSerializable:   "serializable",
	}
	for _, l := range levels {
		t.Run(l.name, func(t *testing.T) {
			pd, err := postgres.New(ctx, pool, postgres.Options{Isolation: l.level})
			if err != nil {
				t.Fatal(err)
			}
			sd, err := postgres.NewSQL(ctx, db, postgres.Options{Isolation: l.level})
			if err != nil {
				t.Fatal(err)
			}
			for _, tc := range []struct {
				asked sql.IsolationLevel
				want  string
			}{
				{sql.LevelDefault, want[l.level]},
				{sql.LevelReadCommitted, "read committed"},
				{sql.LevelSerializable, "serializable"},
			} {
				if got := isolationOf(ctx, t, pd, tc.asked); got != tc.want {
					t.Errorf("pgx Begin(%v) runs at %q, want %q", tc.asked, got, tc.want)
				}
				if got := isolationOf(ctx, t, sd, tc.asked); got != tc.want {
					t.Errorf("database/sql Begin(%v) runs at %q, want %q", tc.asked, got, tc.want)
				}
			}
			if _, err := pd.Begin(ctx, dialect.BeginOptions{Isolation: sql.LevelSnapshot}); !errors.Is(err, idem.ErrInvalidConfig) {
				t.Errorf("pgx Begin at SNAPSHOT = %v, want ErrInvalidConfig", err)
			}
			if _, err := sd.Begin(ctx, dialect.BeginOptions{Isolation: sql.LevelLinearizable}); !errors.Is(err, idem.ErrInvalidConfig) {
				t.Errorf("database/sql Begin at LINEARIZABLE = %v, want ErrInvalidConfig", err)
			}
		})
	}
	if _, err := postgres.New(ctx, pool, postgres.Options{Isolation: sql.LevelSnapshot}); !errors.Is(err, idem.ErrInvalidConfig) {
		t.Errorf("New with an unsupported isolation level = %v, want ErrInvalidConfig", err)
	}
}

func isolationOf[TTx any](ctx context.Context, t *testing.T, d dialect.Driver[TTx], level sql.IsolationLevel) string {
	t.Helper()
	tx, err := d.Begin(ctx, dialect.BeginOptions{Isolation: level})
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	rows, err := tx.Query(ctx, "SELECT current_setting('transaction_isolation')")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var got string
	if !rows.Next() || rows.Scan(&got) != nil {
		t.Fatalf("reading the isolation level: %v", rows.Err())
	}
	return got
}
