// Package vitess_test runs idem's MySQL backend through Vitess's vtgate on a
// keyspace of two shards (-80 and 80-): the conformance suite, and what only
// a sharded keyspace shows, a record beside its effect on each shard and a
// function that writes across shards refused with nothing committed.
package vitess_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
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

// TestMain runs the package's tests; after a failed run it writes what the
// shards' MySQL servers are doing (containers.DiagnoseVitess).
func TestMain(m *testing.M) {
	containers.MainDiagnosing(m, func() { containers.DiagnoseVitess(os.Stderr) })
}

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

// besideRecords routes a table of the suite's as Backend.RouteTable asks:
// by the column that holds each row's scope, through the vindex that
// routes idem's records by scope (Migrate's, xxhash), so that each row
// lives beside its record; or, for a table without one, whose rows all
// belong to records of conformance.DefaultScope, to shard -80 whatever
// its rows hold (Vitess's null vindex), where that scope's records live.
func besideRecords(t *testing.T, q dialect.Queryer, table, scopeColumn string) {
	t.Helper()
	vindex := "xxhash(`" + scopeColumn + "`) USING xxhash"
	if scopeColumn == "" {
		vindex = "first_shard(k) USING `null`"
	}
	vschemaChanges.Lock()
	_, err := q.Exec(t.Context(), "ALTER VSCHEMA ON `"+table+"` ADD VINDEX "+vindex)
	vschemaChanges.Unlock()
	if err != nil {
		t.Fatalf("route %s by %s: %v", table, vindex, err)
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
	if err := steadilyServed(t.Context(), q, table); err != nil {
		t.Fatal(err)
	}
}

// steadilyServed is servedSteadily's wait, for callers without a
// testing.T.
func steadilyServed(ctx context.Context, q dialect.Queryer, table string) error {
	const steady, pause = 5, 40 * time.Millisecond
	deadline := time.Now().Add(30 * time.Second)
	for inRow := 0; inRow < steady; time.Sleep(pause) {
		_, err := q.Exec(ctx, "SELECT 1 FROM `"+table+"` LIMIT 1")
		switch {
		case err == nil:
			inRow++
		case strings.HasSuffix(err.Error(), " not found") && time.Now().Before(deadline):
			inRow = 0
		default:
			return fmt.Errorf("read %s after routing it: %w", table, err)
		}
	}
	return nil
}

// vschemaChanges serialises the VSchema changes of this test binary's
// cases: their Migrates (serialMigrations) and besideRecords. When two ALTER
// VSCHEMA race, one may be refused as made on a stale VSchema (Migrate
// tries again; besideRecords would fail the case); in production, run
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

// caseName is the conformance case t runs: TestConformance/<case>/...
func caseName(t *testing.T) string {
	parts := strings.Split(t.Name(), "/")
	if len(parts) < 2 {
		return ""
	}
	return parts[1]
}

// The conformance suite through vtgate, records routed by scope. The suite
// keeps every case's effects in tables of its own, which besideRecords
// routes beside the records of their scope; a batch over two scopes on two
// shards is refused (mysql.ErrCrossShard), and the model's two scopes lie
// on the two shards.
func TestConformance(t *testing.T) {
	conformance.Run(t, conformance.Backend[*sql.Tx]{
		Name: "vitess",
		Open: func(t *testing.T) dialect.Driver[*sql.Tx] {
			skipIfNotBehindVtgate(t)
			return serialMigrations{newDriver(t, mysql.Options{})}
		},
		InsertLegacy: insertLegacyRouted,
		RouteTable:   besideRecords,
		CrossShard:   mysql.ErrCrossShard,
		BreakCommit: func(t *testing.T) conformance.CommitBreaker[*sql.Tx] {
			return commitcut.MySQLBreaker(t, containers.Vitess(t)+"?"+single, mysql.Options{})
		},
	})
}

// insertLegacyRouted is insertLegacy on a sharded keyspace, where a table
// the first schema version made by hand holds rows only once its owner
// routed it: by scope, through the vindex Migrate uses, which Migrate then
// finds in place.
func insertLegacyRouted(ctx context.Context, q dialect.Queryer, table string, rows []conformance.LegacyRecord) error {
	vschemaChanges.Lock()
	_, err := q.Exec(ctx, "ALTER VSCHEMA ON `"+table+"` ADD VINDEX xxhash(scope) USING xxhash")
	vschemaChanges.Unlock()
	if err != nil {
		return fmt.Errorf("route %s by scope: %w", table, err)
	}
	if err := steadilyServed(ctx, q, table); err != nil {
		return err
	}
	return insertLegacy(ctx, q, table, rows)
}

// insertLegacy writes rows as the first schema version did.
var insertLegacy = conformance.LegacyInserter("INSERT INTO `%s` (scope, idem_key, fingerprint, status, header, body, created_at, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
	func(t time.Time) any { return t.UTC().Format("2006-01-02 15:04:05.000000") })
