package galera_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem/integration/containers"
)

// applierHold holds a node's applier: a session on the node takes FLUSH
// TABLES on a table of the hold's own WITH READ LOCK, and another node
// commits a row into that table. A node applies write sets in order, and
// its applier waits for a FLUSH lock (where it would abort a transaction in
// its way), so nothing committed after that row is applied on the held node
// until the hold ends. The node's own sessions go on, on every other table.
type applierHold struct {
	nodes []*containers.GaleraNode
	table string
}

// newApplierHold creates the hold's table and waits until every node has
// it; the table is dropped when t ends.
func newApplierHold(t *testing.T, c *containers.GaleraCluster) *applierHold {
	t.Helper()
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	h := &applierHold{nodes: c.Nodes(), table: "idemg_hold_" + hex.EncodeToString(b)}
	causal := open(t, h.nodes[0], "wsrep_sync_wait=1")
	if _, err := causal.ExecContext(t.Context(), "CREATE TABLE "+h.table+" (id BIGINT AUTO_INCREMENT PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := causal.ExecContext(ctx, "DROP TABLE IF EXISTS "+h.table); err != nil {
			t.Errorf("drop %s: %v", h.table, err)
		}
	})
	for _, n := range h.nodes {
		if _, err := open(t, n, "wsrep_sync_wait=1").ExecContext(t.Context(), "SELECT COUNT(*) FROM "+h.table); err != nil {
			t.Fatalf("%s on node %s: %v", h.table, n.Name, err)
		}
	}
	return h
}

// on holds the applier of node i (0 for n1) until release, which may be
// called more than once and is called when t ends.
func (h *applierHold) on(t *testing.T, i int) (release func()) {
	t.Helper()
	node := h.nodes[i]
	conn, err := open(t, node, "").Conn(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(t.Context(), "FLUSH TABLES "+h.table+" WITH READ LOCK"); err != nil {
		conn.Close()
		t.Fatalf("hold the applier of %s: %v", node.Name, err)
	}
	var once sync.Once
	release = func() {
		once.Do(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if _, err := conn.ExecContext(ctx, "UNLOCK TABLES"); err != nil {
				t.Errorf("UNLOCK TABLES on %s: %v", node.Name, err)
			}
			conn.Close()
		})
	}
	t.Cleanup(release)
	other := h.nodes[(i+1)%len(h.nodes)]
	if _, err := open(t, other, "").ExecContext(t.Context(), "INSERT INTO "+h.table+" () VALUES ()"); err != nil {
		release()
		t.Fatalf("a row on %s for %s's applier to wait on: %v", other.Name, node.Name, err)
	}
	return release
}
