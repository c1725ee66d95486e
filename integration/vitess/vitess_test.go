// Package vitess_test runs idem's MySQL backend through Vitess's vtgate on a
// keyspace of two shards (-80 and 80-): the conformance suite, and what only
// a sharded keyspace shows, a record beside its effect on each shard and a
// function that writes across shards refused with nothing committed.
package vitess_test

import (
	"context"
	"database/sql"
	"path"
	"strings"
	"sync"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"

	"github.com/idemkit/idem/conformance"
	"github.com/idemkit/idem/dialect"
	"github.com/idemkit/idem/integration/commitcut"
	"github.com/idemkit/idem/integration/containers"
	"github.com/idemkit/idem/mysql"
)

func TestMain(m *testing.M) { containers.Main(m) }

// single is the DSN parameter that makes vtgate refuse a second shard in a
// transaction; New refuses vttestserver's default, MULTI.
const single = "transaction_mode=%27SINGLE%27"

func open(t *testing.T, params string) *sql.DB {
	t.Helper()
	return containers.SharedDB(t, containers.Vitess(t)+"?"+params)
}

func newDriver(t *testing.T, opts mysql.Options) *mysql.Driver {
	t.Helper()
	db := open(t, single) // may start the container first
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d, err := mysql.New(ctx, db, opts)
	if err != nil {
		t.Fatal(err)
	}
	// The connection New reserved behind vtgate goes back to the shared
	// pool with the test.
	t.Cleanup(func() {
		if err := d.Close(); err != nil {
			t.Errorf("close the driver: %v", err)
		}
	})
	return d
}

// onFirstShard routes a table of the suite's to shard -80 whatever its rows
// hold (Vitess's null vindex), where the suite's scope, "tenant-1 POST
// /orders", has its records (xxhash).
func onFirstShard(t *testing.T, q dialect.Queryer, table string) {
	t.Helper()
	vschemaChanges.Lock()
	_, err := q.Exec(t.Context(), "ALTER VSCHEMA ON `"+table+"` ADD VINDEX first_shard(k) USING `null`")
	vschemaChanges.Unlock()
	if err != nil {
		t.Fatalf("route %s to the first shard: %v", table, err)
	}
	servedSteadily(t, q, table)
}

// servedSteadily waits until vtgate has planned a read of table on its
// VSchema several times in a row. Right after an ALTER VSCHEMA, vtgate may
// for a moment plan on an older VSchema without the table (a topology
// event of an earlier change delivered late, or a rebuild of its schema
// tracker that read the VSchema before the change; mysql/vschemalag.go):
// both were under way when the change was made and end within
// milliseconds, so a read planned steadily for longer than that is past
// them.
func servedSteadily(t *testing.T, q dialect.Queryer, table string) {
	t.Helper()
	const steady, pause = 5, 40 * time.Millisecond
	deadline := time.Now().Add(30 * time.Second)
	for inRow := 0; inRow < steady; time.Sleep(pause) {
		_, err := q.Exec(t.Context(), "SELECT 1 FROM `"+table+"` LIMIT 1")
		switch {
		case err == nil:
			inRow++
		case strings.HasSuffix(err.Error(), " not found") && time.Now().Before(deadline):
			inRow = 0
		default:
			t.Fatalf("read %s after routing it: %v", table, err)
		}
	}
}

// vschemaChanges serialises the VSchema changes of this test binary's
// cases: their Migrates (serialMigrations) and onFirstShard. When two ALTER
// VSCHEMA race, one may be refused as made on a stale VSchema (Migrate
// tries again; onFirstShard would fail the case); in production, run
// Migrate from one place.
var vschemaChanges sync.Mutex

// serialMigrations is a driver whose schema transactions (Migrate's) hold
// vschemaChanges from Begin to their end.
type serialMigrations struct{ dialect.Driver[*sql.Tx] }

func (d serialMigrations) Begin(ctx context.Context, opts dialect.BeginOptions) (dialect.Tx[*sql.Tx], error) {
	if !opts.Schema {
		return d.Driver.Begin(ctx, opts)
	}
	vschemaChanges.Lock()
	tx, err := d.Driver.Begin(ctx, opts)
	if err != nil {
		vschemaChanges.Unlock()
		return nil, err
	}
	return &unlockAtEnd{Tx: tx}, nil
}

// unlockAtEnd releases vschemaChanges once its transaction ends.
type unlockAtEnd struct {
	dialect.Tx[*sql.Tx]
	once sync.Once
}

func (t *unlockAtEnd) Commit(ctx context.Context) error {
	defer t.once.Do(vschemaChanges.Unlock)
	return t.Tx.Commit(ctx)
}

func (t *unlockAtEnd) Rollback(ctx context.Context) error {
	defer t.once.Do(vschemaChanges.Unlock)
	return t.Tx.Rollback(ctx)
}

// notOnShards names the conformance cases that do not hold on a keyspace
// of two shards, beside those of notBehindVtgate, each with the reason
// (mysql/vitess.go says more): cases that write or delete across shards
// themselves. They skip, as .ci/skips allows; every other case runs
// through vtgate, and TestConformanceUnsharded runs these too.
var notOnShards = map[string]string{
	"BatchInvalid":                   "its batch holds one key in two scopes, whose records live on both shards: vtgate refuses the batch (1317), as any batch across shards",
	"AdminList":                      "its records are in several scopes, on both shards, while the suite keeps their effects in one table on the first shard: the writes span two shards (1317)",
	"ScopesIsolateKeys":              "its records are in two scopes, as AdminList",
	"Model":                          "its sequences use several scopes (both shards) with their effects in one table on the first shard, and its reset deletes both shards' records in one transaction",
	"CompleteFindsNothingRollsBack":  "the case deletes the claimed record by key alone from another session, a DELETE vtgate sends to both shards and refuses under SINGLE",
	"MigrateAfterCrashBeforeVersion": "the case forgets versions with a DELETE by a range of versions, which vtgate sends to both shards and refuses under SINGLE",
	"MigrateUpgradesUnversioned":     "the case creates the first version's table outside Migrate, which the VSchema does not route",
}

// skipIfNotOnShards skips t when its case is in notBehindVtgate or
// notOnShards.
func skipIfNotOnShards(t *testing.T) {
	name := caseName(t)
	if reason, ok := notBehindVtgate[name]; ok {
		t.Skipf("not behind vtgate yet: %s", reason)
	}
	for pattern, reason := range notOnShards {
		if ok, _ := path.Match(pattern, name); ok {
			t.Skipf("not on a sharded keyspace yet: %s", reason)
		}
	}
}

// caseName is the conformance case t runs: TestConformance/<case>/...
func caseName(t *testing.T) string {
	parts := strings.Split(t.Name(), "/")
	if len(parts) < 2 {
		return ""
	}
	return parts[1]
}

// The conformance suite through vtgate, records routed by scope. The suite
// keeps every case's effects in tables of its own, which onFirstShard puts
// beside the records of its scope.
func TestConformance(t *testing.T) {
	conformance.Run(t, conformance.Backend[*sql.Tx]{
		Name: "vitess",
		Open: func(t *testing.T) dialect.Driver[*sql.Tx] {
			skipIfNotOnShards(t)
			return serialMigrations{newDriver(t, mysql.Options{})}
		},
		InsertLegacy: insertLegacy,
		RouteTable:   onFirstShard,
		BreakCommit: func(t *testing.T) conformance.CommitBreaker[*sql.Tx] {
			return commitcut.MySQLBreaker(t, containers.Vitess(t)+"?"+single, mysql.Options{})
		},
	})
}

// insertLegacy writes rows as the first schema version did.
var insertLegacy = conformance.LegacyInserter("INSERT INTO `%s` (scope, idem_key, fingerprint, status, header, body, created_at, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
	func(t time.Time) any { return t.UTC().Format("2006-01-02 15:04:05.000000") })
