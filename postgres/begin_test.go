package postgres_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/idemkit/idem/dialect"
	"github.com/idemkit/idem/postgres"
)

// TestBeginIsolation: Do's transactions run at the configured level; purge
// batches always run at READ COMMITTED.
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
			pd, err := postgres.New(pool, postgres.Options{Isolation: l.level})
			if err != nil {
				t.Fatal(err)
			}
			sd, err := postgres.NewSQL(db, postgres.Options{Isolation: l.level})
			if err != nil {
				t.Fatal(err)
			}
			for _, tc := range []struct {
				purge bool
				want  string
			}{
				{false, want[l.level]},
				{true, "read committed"},
			} {
				if got := isolationOf(ctx, t, func(ctx context.Context) (dialect.Tx, error) {
					return pd.Begin(ctx, dialect.BeginOptions{Purge: tc.purge})
				}); got != tc.want {
					t.Errorf("pgx Begin(Purge: %v) runs at %q, want %q", tc.purge, got, tc.want)
				}
				if got := isolationOf(ctx, t, func(ctx context.Context) (dialect.Tx, error) {
					return sd.Begin(ctx, dialect.BeginOptions{Purge: tc.purge})
				}); got != tc.want {
					t.Errorf("database/sql Begin(Purge: %v) runs at %q, want %q", tc.purge, got, tc.want)
				}
			}
		})
	}
	if _, err := postgres.New(pool, postgres.Options{Isolation: sql.LevelSnapshot}); err == nil {
		t.Errorf("New with an unsupported isolation level succeeded")
	}
}

func isolationOf(ctx context.Context, t *testing.T, begin func(context.Context) (dialect.Tx, error)) string {
	t.Helper()
	tx, err := begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	rows, err := tx.Query(ctx, "SELECT current_setting('transaction_isolation')")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var level string
	if !rows.Next() || rows.Scan(&level) != nil {
		t.Fatalf("reading the isolation level: %v", rows.Err())
	}
	return level
}
