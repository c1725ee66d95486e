package galera_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"
	"time"

	"github.com/idemkit/idem/conformance"
	"github.com/idemkit/idem/dialect"
	"github.com/idemkit/idem/integration/containers"
	"github.com/idemkit/idem/mysql"
)

// The suite's upgrade case creates a first-version table through the pool
// and then inserts its rows, maybe on another node. A node that has not yet
// applied the CREATE TABLE must wait for it, not answer 1146: n2's applier
// is held while n1 creates the table, and insertLegacy on n2 must succeed
// once the hold ends.
func TestInsertLegacyWaitsForTable(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	nodes := nodeDrivers(t, "wsrep_sync_wait=1", mysql.Options{})
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	table, err := dialect.NewTable("idemg_legacy_" + hex.EncodeToString(b))
	if err != nil {
		t.Fatal(err)
	}
	hold := newApplierHold(t, containers.Galera(t))
	release := hold.on(t, 1)
	t.Cleanup(func() {
		release()
		dctx, dcancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer dcancel()
		if _, err := nodes[0].Pool().Exec(dctx, "DROP TABLE IF EXISTS "+table.Name()); err != nil {
			t.Errorf("drop %s: %v", table.Name(), err)
		}
	})
	for _, stmt := range nodes[0].Dialect().Schema(table).Migrations[0].Statements {
		if _, err := nodes[0].Pool().Exec(ctx, stmt); err != nil {
			t.Fatalf("on n1: %s: %v", stmt, err)
		}
	}
	// The premise: n2 has not applied the CREATE TABLE.
	if _, err := open(t, containers.Galera(t).Nodes()[1], "").ExecContext(ctx, "SELECT COUNT(*) FROM "+table.Name()); err == nil {
		t.Fatalf("n2 already has %s: its applier was not held", table.Name())
	}
	var releasedAt time.Time
	released := make(chan struct{})
	go func() {
		defer close(released)
		time.Sleep(time.Second)
		releasedAt = time.Now()
		release()
	}()
	now := time.Now().UTC().Truncate(time.Microsecond)
	err = insertLegacy(ctx, nodes[1].Pool(), table.Name(), []conformance.LegacyRecord{{
		Scope: "s", Key: "legacy", Fingerprint: make([]byte, 32),
		CreatedAt: now, ExpiresAt: now.Add(time.Hour),
	}})
	done := time.Now()
	<-released
	if err != nil {
		t.Fatalf("insert on n2 while it had not applied the CREATE TABLE: %v, want it to wait and succeed", err)
	}
	if done.Before(releasedAt) {
		t.Fatalf("the insert on n2 ended %s before the hold did: it did not wait for the CREATE TABLE", releasedAt.Sub(done))
	}
}
