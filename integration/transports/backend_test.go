package transports

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // registers "pgx"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/integration/containers"
	"github.com/idemkit/idem/postgres"
)

// storeWait is the stores' WaitBound: short, since every step runs alone
// and nothing but a wrong answer waits for a key.
const storeWait = 50 * time.Millisecond

// backend is a database with an idem store and the handler's tables:
// effects (one row per run's write, kept when the run commits) and taken
// (one row, for a statement that fails on purpose).
type backend struct {
	name    string
	db      *sql.DB
	store   *idem.Store[*sql.Tx]
	effects string
	taken   string
	dollar  bool // PostgreSQL's $1 placeholders, not ?
	aborts  bool // a failed statement aborts the transaction (PostgreSQL)
}

func newSQLite(t *testing.T) *backend {
	s := idemtest.NewSQLite(t, idem.Config{WaitBound: storeWait})
	b := &backend{name: "sqlite", db: s.DB, store: s.Store, effects: "transport_effects", taken: "transport_taken"}
	b.createTables(t)
	return b
}

// newPostgres is a store on the package's PostgreSQL container (it skips
// when none can be had), in tables of its own.
func newPostgres(t *testing.T) *backend {
	dsn := containers.Postgres(t)
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	drv, err := postgres.NewSQL(ctx, db, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	suffix := fmt.Sprint(time.Now().UnixNano())
	store, err := idem.New(drv, idem.Config{Table: "transport_idem_" + suffix, WaitBound: storeWait})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	b := &backend{name: "postgres", db: db, store: store, dollar: true, aborts: true,
		effects: "transport_effects_" + suffix, taken: "transport_taken_" + suffix}
	b.createTables(t)
	t.Cleanup(func() {
		for _, tbl := range []string{b.effects, b.taken, "transport_idem_" + suffix} {
			_, _ = db.ExecContext(context.Background(), "DROP TABLE IF EXISTS "+tbl)
		}
	})
	return b
}

func (b *backend) createTables(t *testing.T) {
	for _, q := range []string{
		"CREATE TABLE " + b.effects + " (principal TEXT NOT NULL, route TEXT NOT NULL, idem_key TEXT NOT NULL, run INTEGER NOT NULL)",
		"CREATE TABLE " + b.taken + " (v TEXT PRIMARY KEY)",
		"INSERT INTO " + b.taken + " (v) VALUES ('taken')",
	} {
		if _, err := b.db.ExecContext(t.Context(), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

// q rewrites ? placeholders for the backend.
func (b *backend) q(query string) string {
	if !b.dollar {
		return query
	}
	var out strings.Builder
	n := 0
	for _, c := range query {
		if c == '?' {
			n++
			fmt.Fprintf(&out, "$%d", n)
			continue
		}
		out.WriteRune(c)
	}
	return out.String()
}

// writeEffect is the handler's write, in idem's transaction.
func (b *backend) writeEffect(ctx context.Context, tx *sql.Tx, principal string, k sk, run int) error {
	_, err := tx.ExecContext(ctx, b.q("INSERT INTO "+b.effects+" (principal, route, idem_key, run) VALUES (?, ?, ?, ?)"),
		principal, k.Route, k.Key, run)
	return err
}

// failStatement runs a statement that fails (a unique violation); its
// error is what the handler ignores. On PostgreSQL it aborts the
// transaction.
func (b *backend) failStatement(ctx context.Context, tx *sql.Tx) error {
	_, err := tx.ExecContext(ctx, "INSERT INTO "+b.taken+" (v) VALUES ('taken')")
	if err == nil {
		return fmt.Errorf("the duplicate insert into %s succeeded", b.taken)
	}
	return nil
}

// effectCount counts the committed effects of a key.
func (b *backend) effectCount(ctx context.Context, principal string, k sk) (int, error) {
	var n int
	err := b.db.QueryRowContext(ctx, b.q("SELECT COUNT(*) FROM "+b.effects+" WHERE principal = ? AND route = ? AND idem_key = ?"),
		principal, k.Route, k.Key).Scan(&n)
	return n, err
}
