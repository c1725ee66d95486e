package vitess_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/integration/containers"
	"github.com/idemkit/idem/mysql"
)

// The keyspace's shards, as vttestserver makes two.
var shards = []string{"-80", "80-"}

// Two tenants whose scopes hash to different shards ("a" to -80, "b" to
// 80-, by xxhash).
const tenantA, tenantB = "a", "b"

// shardDB returns a pool whose statements go to one shard of the keyspace
// as they are (vtgate's USE keyspace:shard target), to see where rows live.
func shardDB(t *testing.T, shard string) *sql.DB {
	t.Helper()
	db, err := sql.Open("mysql", containers.VitessIn(t, containers.VitessKeyspace+":"+shard))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// shop is a store on table and an orders table routed by tenant with the
// store's vindex, so that a tenant's orders live beside its records.
type shop struct {
	store  *idem.Store[*sql.Tx]
	driver *mysql.Driver
	table  string
	orders string
}

func newShop(t *testing.T, table string, opts mysql.Options) *shop {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	d := newDriver(t, opts)
	store, err := idem.New(serialMigrations{d}, idem.Config{Table: table})
	if err != nil {
		t.Fatal(err)
	}
	s := &shop{store: store, driver: d, table: table, orders: table + "_orders"}
	db := d.DB()
	t.Cleanup(func() {
		for _, name := range []string{s.orders, table, table + "_schema", table + "_fence"} {
			if _, err := db.Exec("DROP TABLE IF EXISTS `" + name + "`"); err != nil {
				t.Errorf("drop %s: %v", name, err)
			}
		}
	})
	if err := store.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	vschemaChanges.Lock()
	for _, stmt := range []string{
		"CREATE TABLE `" + s.orders + "` (tenant VARBINARY(255) NOT NULL, id VARCHAR(64) NOT NULL, item INT NOT NULL, PRIMARY KEY (tenant, id))",
		"ALTER VSCHEMA ON `" + s.orders + "` ADD VINDEX xxhash(tenant) USING xxhash",
	} {
		if _, err := db.ExecContext(ctx, stmt); err != nil {
			vschemaChanges.Unlock()
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	vschemaChanges.Unlock()
	// The orders leave the VSchema with the test, so that the test can run
	// again on the same vtgate.
	t.Cleanup(func() {
		vschemaChanges.Lock()
		defer vschemaChanges.Unlock()
		if _, err := db.Exec("ALTER VSCHEMA DROP TABLE `" + s.orders + "`"); err != nil {
			t.Errorf("take %s out of the VSchema: %v", s.orders, err)
		}
	})
	servedSteadily(t, d.Pool(), s.orders)
	return s
}

// order is a function that writes one order for each tenant named, in
// order, returning the first error.
func (s *shop) order(id string, tenants ...string) idem.Func[*sql.Tx] {
	return func(ctx context.Context, tx *sql.Tx) (idem.Response, error) {
		for _, tenant := range tenants {
			if _, err := tx.ExecContext(ctx, "INSERT INTO `"+s.orders+"` (tenant, id, item) VALUES (?, ?, 88)", tenant, id); err != nil {
				return idem.Response{}, err
			}
		}
		return idem.Response{Status: 201, Body: []byte(`{"order":"` + id + `"}`)}, nil
	}
}

// placement says, per shard, the scopes of the store's records and the
// tenants of the orders it holds.
func (s *shop) placement(t *testing.T) map[string][2][]string {
	t.Helper()
	out := map[string][2][]string{}
	for _, shard := range shards {
		db := shardDB(t, shard)
		var got [2][]string
		for i, query := range []string{
			"SELECT CONCAT(scope, '/', idem_key) FROM `" + s.table + "` ORDER BY 1",
			"SELECT CONCAT(tenant, '/', id) FROM `" + s.orders + "` ORDER BY 1",
		} {
			rows, err := db.QueryContext(t.Context(), query)
			if err != nil {
				t.Fatalf("shard %s: %s: %v", shard, query, err)
			}
			for rows.Next() {
				var v string
				if err := rows.Scan(&v); err != nil {
					t.Fatal(err)
				}
				got[i] = append(got[i], v)
			}
			if err := rows.Err(); err != nil {
				t.Fatal(err)
			}
			rows.Close()
		}
		out[shard] = got
	}
	return out
}

func request(scope, key string) idem.Request {
	return idem.Request{Scope: scope, Key: key, Fingerprint: idem.FingerprintRequest("POST", "/orders", []byte(key))}
}

// Two tenants' records live on different shards, each beside its tenant's
// order, and a retry replays from there.
func TestRecordBesideItsEffect(t *testing.T) {
	s := newShop(t, "idem_beside", mysql.Options{})
	for _, tenant := range []string{tenantA, tenantB} {
		req := request(tenant, "order-1")
		for _, want := range []idem.Outcome{idem.Won, idem.Replay} {
			res, err := s.store.Do(t.Context(), req, s.order("order-1", tenant))
			if err != nil || res.Outcome != want || res.Response.Status != 201 {
				t.Fatalf("tenant %s: Do = %v %d, %v; want %v 201", tenant, res.Outcome, res.Response.Status, err, want)
			}
		}
	}
	want := map[string][2][]string{
		"-80": {{tenantA + "/order-1"}, {tenantA + "/order-1"}},
		"80-": {{tenantB + "/order-1"}, {tenantB + "/order-1"}},
	}
	if got := s.placement(t); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("records and orders per shard (records, orders): %v, want %v", got, want)
	}
}

// A function that writes on the record's shard and then on another is
// refused by vtgate (transaction_mode SINGLE): Do returns the refusal,
// which the dialect classifies as ErrCrossShard, and nothing is committed
// on either shard. A function that swallows the refusal and writes on
// cannot commit either: the guard finds the transaction gone.
func TestCrossShardRefused(t *testing.T) {
	s := newShop(t, "idem_cross", mysql.Options{})
	req := request(tenantA, "cross-1")
	_, err := s.store.Do(t.Context(), req, s.order("cross-1", tenantA, tenantB))
	if err == nil || !errors.Is(s.driver.Dialect().Classify(err), mysql.ErrCrossShard) || !errors.Is(s.driver.Dialect().Classify(err), idem.ErrTxAborted) {
		t.Fatalf("Do writing on two shards: %v, want vtgate's refusal, ErrCrossShard and ErrTxAborted once classified", err)
	}

	swallowed := func(ctx context.Context, tx *sql.Tx) (idem.Response, error) {
		_, _ = s.order("cross-2", tenantA, tenantB)(ctx, tx)
		// Writes on: after vtgate's rollback this statement would run on
		// its own, outside the transaction, were the session not guarded.
		if _, err := tx.ExecContext(ctx, "INSERT INTO `"+s.orders+"` (tenant, id, item) VALUES (?, 'cross-2-after', 1)", tenantA); err != nil {
			return idem.Response{}, err
		}
		return idem.Response{Status: 201}, nil
	}
	if res, err := s.store.Do(t.Context(), request(tenantA, "cross-2"), swallowed); err == nil {
		t.Fatalf("Do whose function swallowed the refusal: %+v, nil error; want an error", res)
	}

	for _, key := range []string{"cross-1", "cross-2"} {
		if _, err := s.store.Lookup(t.Context(), tenantA, key); !errors.Is(err, idem.ErrNotFound) {
			t.Errorf("Lookup %s after the refusal: %v, want ErrNotFound", key, err)
		}
	}
	want := map[string][2][]string{"-80": {nil, nil}, "80-": {nil, nil}}
	if got := s.placement(t); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("records and orders per shard after the refusals: %v, want none anywhere", got)
	}
}

// New refuses vtgate's transaction_mode MULTI, under which a record could
// commit on one shard without its effect on another, and TWOPC, untested
// (vttestserver cannot run it).
func TestNewRefusesOtherTransactionModes(t *testing.T) {
	_, err := mysql.New(t.Context(), open(t, "transaction_mode=%27MULTI%27"), mysql.Options{})
	if !errors.Is(err, idem.ErrInvalidConfig) || !strings.Contains(err.Error(), "MULTI") {
		t.Fatalf("New on a MULTI session: %v, want ErrInvalidConfig naming MULTI", err)
	}
	if _, err := mysql.New(t.Context(), open(t, "transaction_mode=%27TWOPC%27"), mysql.Options{}); !errors.Is(err, idem.ErrInvalidConfig) || !strings.Contains(err.Error(), "TWOPC") {
		t.Fatalf("New on a TWOPC session: %v, want ErrInvalidConfig naming TWOPC", err)
	}
}

// Migrate routes the records by the column VitessOptions.ShardBy names and
// refuses a table the VSchema routes otherwise; records routed by key live
// beside effects routed by the same key.
func TestMigrateRoutesByShardBy(t *testing.T) {
	byKey := mysql.Options{Vitess: mysql.VitessOptions{ShardBy: "idem_key"}}
	s := newShop(t, "idem_bykey", byKey)
	var columns, name string
	if err := s.driver.DB().QueryRowContext(t.Context(), "SHOW VSCHEMA VINDEXES ON idem_bykey").Scan(&columns, &name, new(sql.NullString), new(sql.NullString), new(sql.NullString)); err != nil {
		t.Fatal(err)
	}
	if columns != "idem_key" || name != "xxhash" {
		t.Fatalf("idem_bykey's vindex: %s(%s), want xxhash(idem_key)", name, columns)
	}
	// One scope, keys "a" and "b": by key, their records split over the
	// shards, each beside an order whose tenant column holds the key.
	for _, key := range []string{tenantA, tenantB} {
		if _, err := s.store.Do(t.Context(), request("one scope", key), s.order(key, key)); err != nil {
			t.Fatalf("Do %s: %v", key, err)
		}
	}
	want := map[string][2][]string{
		"-80": {{"one scope/" + tenantA}, {tenantA + "/" + tenantA}},
		"80-": {{"one scope/" + tenantB}, {tenantB + "/" + tenantB}},
	}
	if got := s.placement(t); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("records and orders per shard: %v, want %v", got, want)
	}

	other, err := idem.New(serialMigrations{newDriver(t, mysql.Options{})}, idem.Config{Table: "idem_bykey"})
	if err != nil {
		t.Fatal(err)
	}
	if err := other.Migrate(t.Context()); !errors.Is(err, idem.ErrInvalidConfig) || !strings.Contains(err.Error(), "xxhash(idem_key)") {
		t.Fatalf("Migrate by scope of a table routed by key: %v, want ErrInvalidConfig naming the VSchema's vindex", err)
	}
}

// Lease mode reads the token floor on a connection of its own behind
// vtgate. Taken from the pool, it would deadlock a small pool: every
// connection held by a lease claim's transaction, each waiting for one
// more. New reserves it instead, and refuses a pool of one connection.
func TestLeaseOnSmallPool(t *testing.T) {
	db, err := sql.Open("mysql", containers.Vitess(t)+"?"+single)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	db.SetMaxOpenConns(1)
	if _, err := mysql.New(t.Context(), db, mysql.Options{}); !errors.Is(err, idem.ErrInvalidConfig) {
		t.Fatalf("New on a pool of one connection: %v, want ErrInvalidConfig", err)
	}
	db.SetMaxOpenConns(2)
	d, err := mysql.New(t.Context(), db, mysql.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Close() })
	store, err := idem.New(serialMigrations{d}, idem.Config{Table: "idem_smallpool"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, name := range []string{"idem_smallpool", "idem_smallpool_schema", "idem_smallpool_fence"} {
			if _, err := open(t, single).Exec("DROP TABLE IF EXISTS `" + name + "`"); err != nil {
				t.Errorf("drop %s: %v", name, err)
			}
		}
	})
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := store.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	const claims = 6
	errs := make(chan error, claims)
	for i := range claims {
		go func() {
			l, err := store.Lease(ctx, request(tenantB, fmt.Sprintf("lease-%d", i)))
			if err == nil {
				err = l.Release(ctx)
			}
			errs <- err
		}()
	}
	for range claims {
		if err := <-errs; err != nil {
			t.Fatalf("a lease claim on a pool of two connections: %v", err)
		}
	}
}
