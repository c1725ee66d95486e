// Package grouprepl_test runs idem on MySQL Group Replication (MySQL 9.7,
// three members): single-primary behind MySQL Router, with the primary
// killed under a load of retrying clients; multi-primary, with one key
// raced on two members and a member cut from the majority at COMMIT.
package grouprepl_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/integration/containers"
	"github.com/idemkit/idem/integration/retryload"
	"github.com/idemkit/idem/mysql"
)

func TestMain(m *testing.M) { containers.Main(m) }

// dsnParams bound every connection's waits.
const dsnParams = "?timeout=2s&readTimeout=30s&writeTimeout=30s"

// openDB opens a pool on dsn, closed when t ends.
func openDB(t *testing.T, dsn string, maxConns int) *sql.DB {
	t.Helper()
	db, err := sql.Open("mysql", dsn+dsnParams)
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(maxConns)
	db.SetMaxIdleConns(maxConns)
	t.Cleanup(func() { db.Close() })
	return db
}

// newStore is a store for table on db, migrated.
func newStore(t *testing.T, db *sql.DB, cfg idem.Config) *idem.Store[*sql.Tx] {
	t.Helper()
	s := openStore(t, db, cfg)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := s.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	return s
}

// openStore is a store for table on db, not migrated.
func openStore(t *testing.T, db *sql.DB, cfg idem.Config) *idem.Store[*sql.Tx] {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	d, err := mysql.New(ctx, db, mysql.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s, err := idem.New(d, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// migrated waits (at most 30 s) until s's member has applied the latest
// schema, migrated on another member: on a multi-primary group Migrate
// runs from one place, and the others apply it a moment later.
func migrated(t *testing.T, s *idem.Store[*sql.Tx]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	for {
		v, err := s.Version(ctx)
		if err == nil && v.Current == v.Latest {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the member has not applied the schema: %+v, %v", v, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// TestPrimaryKilled: 16 workers drive 300 intentions through MySQL Router
// while the primary is killed (SIGKILL). The group elects n2 (the next
// weight), the router's next destination. A commit the primary acknowledged
// was certified by a majority first, so it survives on n2: retryload checks
// one effect per intention with its record beside it, every unknown commit
// resolved, no key pending, every answer the stored one. The test reports
// the time from the kill to the first claim committed through the router.
func TestPrimaryKilled(t *testing.T) {
	g := containers.StartGroupReplication(t, containers.GroupOptions{})
	db := openDB(t, g.Router, retryload.DefaultWorkers+4)
	ctx := t.Context()
	if _, err := db.ExecContext(ctx, "CREATE TABLE group_effects (id BIGINT AUTO_INCREMENT PRIMARY KEY, k VARCHAR(64) NOT NULL, nonce VARCHAR(32) NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	// 100 ms of work per execution: 16 transactions are always in flight,
	// and the load outlasts the election.
	l := &retryload.Load[*sql.Tx]{
		FaultAfter: 50,
		Insert: func(ctx context.Context, tx *sql.Tx, key, nonce string) error {
			if _, err := tx.ExecContext(ctx, "DO SLEEP(0.1)"); err != nil {
				return err
			}
			_, err := tx.ExecContext(ctx, "INSERT INTO group_effects (k, nonce) VALUES (?, ?)", key, nonce)
			return err
		},
		Effects: retryload.EffectsSQL(db, "group_effects"),
	}
	l.Store = newStore(t, db, idem.Config{Table: "idem_group", CommitTimeout: 5 * time.Second, Observer: l.Observer()})
	// The fault runs beside the load; the load may end first.
	recovery := l.FaultBeside(t.Context(), g.Members[0].Kill)
	rep := l.Run(t)
	recovered := recovery(t)
	if !rep.Struck() {
		t.Errorf("no call met the killed primary")
	}
	states, err := g.Members[1].States(ctx)
	t.Logf("primary n1 killed: first claim committed through the router %v later; the group as n2 sees it: %+v (%v)",
		recovered.Round(time.Millisecond), states, err)
}
