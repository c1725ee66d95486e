package galera_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/dialect"
	"github.com/idemkit/idem/integration/containers"
	"github.com/idemkit/idem/mysql"
)

// fixture is a store's table and an effect table on the cluster, for the
// tests that drive nodes one by one. Its drivers do not read causally
// (wsrep_sync_wait=0, the server's default), so what idem does on its own
// is what they show; the fixture's own counts do.
type fixture struct {
	t       *testing.T
	ctx     context.Context
	cluster *containers.GaleraCluster
	// nodes are drivers on n1, n2, n3 (wsrep_sync_wait=0).
	nodes   []*mysql.Driver
	table   string
	effects string
	// causal reads on n1 with wsrep_sync_wait=1, for the test's counts.
	causal *sql.DB
}

// newFixture creates the tables, migrated from n1, and waits until every
// node has them.
func newFixture(t *testing.T, name string, timeout time.Duration) *fixture {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	t.Cleanup(cancel)
	c := containers.Galera(t)
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	f := &fixture{
		t: t, ctx: ctx, cluster: c,
		nodes:  nodeDrivers(t, "", mysql.Options{}),
		table:  "idemg_" + name + "_" + hex.EncodeToString(b),
		causal: open(t, c.Nodes()[0], "wsrep_sync_wait=1"),
	}
	f.effects = f.table + "_fx"
	t.Cleanup(func() {
		dctx, dcancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer dcancel()
		if _, err := f.causal.ExecContext(dctx, "DROP TABLE IF EXISTS "+f.table+", "+f.table+"_schema, "+f.effects); err != nil {
			t.Errorf("drop tables: %v", err)
		}
	})
	if err := f.store(f.nodes[0], idem.Config{}).Migrate(ctx); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	if _, err := f.causal.ExecContext(ctx, "CREATE TABLE "+f.effects+" (id BIGINT AUTO_INCREMENT PRIMARY KEY, k VARCHAR(255) NOT NULL, node VARCHAR(8) NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	for i, n := range c.Nodes() {
		// A causal read on each node returns once the node applied the DDL.
		if _, err := open(t, n, "wsrep_sync_wait=1").ExecContext(ctx, "SELECT COUNT(*) FROM "+f.table+" JOIN "+f.effects); err != nil {
			t.Fatalf("tables on node n%d: %v", i+1, err)
		}
	}
	return f
}

// store returns a store on the fixture's table through d.
func (f *fixture) store(d dialect.Driver[*sql.Tx], cfg idem.Config) *idem.Store[*sql.Tx] {
	f.t.Helper()
	cfg.Table = f.table
	s, err := idem.New(d, cfg)
	if err != nil {
		f.t.Fatal(err)
	}
	return s
}

// work is the user's write: one effect row for key, made in the claim's
// transaction, and a response naming the node.
func (f *fixture) work(key, node string) idem.Func[*sql.Tx] {
	return func(ctx context.Context, tx *sql.Tx) (idem.Response, error) {
		if _, err := tx.ExecContext(ctx, "INSERT INTO "+f.effects+" (k, node) VALUES (?, ?)", key, node); err != nil {
			return idem.Response{}, err
		}
		return idem.Response{Status: 201, Body: []byte("created on " + node)}, nil
	}
}

// effectCount counts the committed effects of key, reading causally.
func (f *fixture) effectCount(key string) int {
	f.t.Helper()
	var n int
	if err := f.causal.QueryRowContext(f.ctx, "SELECT COUNT(*) FROM "+f.effects+" WHERE k = ?", key).Scan(&n); err != nil {
		f.t.Fatal(err)
	}
	return n
}

// request is a request for key with a fixed body.
func request(key string) idem.Request {
	return idem.Request{Scope: "tenant-1 POST /orders", Key: key, Fingerprint: idem.FingerprintRequest("POST", "/orders", []byte("order "+key))}
}

// status sums a wsrep status counter over the nodes.
func (f *fixture) status(name string) int64 {
	f.t.Helper()
	var sum int64
	for _, n := range f.cluster.Nodes() {
		var v string
		var got int64
		if err := open(f.t, n, "").QueryRowContext(f.ctx, "SHOW STATUS LIKE '"+name+"'").Scan(&v, &got); err != nil {
			f.t.Fatalf("%s on %s: %v", name, n.Name, err)
		}
		sum += got
	}
	return sum
}

func nodeName(i int) string { return fmt.Sprintf("n%d", i+1) }
