package conformance

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/dialect"
)

// The harness both of idem's suites (this one and idemhttp/idemhttptest)
// build on, exported for suites of your own: a Backend, cases run as
// parallel subtests, and a Fixture per case.

// Backend is what a dialect's tests hand to a suite.
type Backend[TTx any] struct {
	// Name appears in every failure message ("postgres/pgx/serializable").
	Name string
	// Open returns the driver one test runs on. Tests may share a database:
	// each creates and drops its own tables. Open may call t.Skip or t.Fatal.
	Open func(t *testing.T) dialect.Driver[TTx]
	// InsertLegacy inserts rows into table the way the first version of
	// the schema stored them (its columns only, its time encoding), for the
	// upgrade case. A backend whose schema has one version may leave it
	// nil; the case then fails, saying so, once a second version exists.
	// q is the driver's pool; the suite created table through it, maybe
	// on another node of a cluster. On a cluster whose nodes apply others'
	// commits later, the insert must wait until its node has the table (on
	// Galera, wsrep_sync_wait for INSERT).
	InsertLegacy func(ctx context.Context, q dialect.Queryer, table string, rows []LegacyRecord) error
	// Migrate, when set, creates each case's table its own way before the
	// case runs: a migration tool applying idem's files (package
	// migrationfiles), say. The fixture then checks that Store.Version
	// finds the table at the latest version and that Store.Migrate changes
	// nothing. Migrate registers the cleanup of whatever else it creates
	// (the tool's own version table); the fixture drops the table and
	// <table>_schema.
	Migrate func(t *testing.T, d dialect.Driver[TTx], table string)
	// BeginReadOnly begins a transaction that refuses writes on d's
	// database, rolled back when t ends. The case that checks a claim in
	// a read-only transaction fails when it is nil; it may call t.Skip
	// where the database has no read-only transactions.
	BeginReadOnly func(t *testing.T, d dialect.Driver[TTx]) TTx
	// BreakCommit, when set, returns a driver on the same database as
	// Open's whose connection can be made to break right after a COMMIT
	// leaves. Leave it nil where no connection can be lost (a database in
	// the process, like SQLite): the case that needs it then skips and
	// says so.
	BreakCommit func(t *testing.T) CommitBreaker[TTx]
	// Restart, when set, restarts the database server Open's drivers talk
	// to, while a case runs, and returns once the server was told to start
	// again (it need not accept connections yet). Connections break;
	// transactions in flight roll back, or commit with an unknown outcome
	// if their COMMIT was under way. The History case restarts the server
	// once or twice during its run, the Restarts case up to six times
	// (and fails without Restart). Leave it nil where no restart is
	// possible (a database in the process) or where it would disturb
	// other tests sharing the server: run History and Restarts alone, each
	// with RunCases, on a server of its own.
	Restart func(ctx context.Context) error
	// RouteTable, when set, runs after the suite creates a table of its
	// own (a case's effects) and before any row is written to it: a
	// sharded backend routes the table so that each row lives on the
	// shard of the record it belongs to (on Vitess, a VSchema entry).
	// scopeColumn names the column that holds, in each row, the scope of
	// that record (Fixture.CreateScopedTable): route by it as the records
	// are routed by scope. When it is empty (CreateTable), every row
	// belongs to a record of the suite's default scope, DefaultScope, and
	// the suite's tables of that kind have a column k to route by. q is
	// the driver's pool.
	RouteTable func(t *testing.T, q dialect.Queryer, table, scopeColumn string)
	// CrossShard, when set, is the backend's refusal of a transaction
	// that writes on two shards (on Vitess under transaction_mode SINGLE,
	// mysql.ErrCrossShard), matched with errors.Is on an error or on the
	// dialect's classification of it; set it for a backend whose
	// RouteTable keeps scopes on different shards. The model then expects
	// its batches over both of its scopes, which lie on the two shards of
	// a keyspace split in two by Vitess's xxhash, to be refused so before
	// the function runs, with nothing written. Leave it nil where one
	// transaction may write any scope.
	CrossShard error
}

// isCrossShard reports whether err is b.CrossShard, as it is or as d's
// dialect classifies it.
func isCrossShard[TTx any](b Backend[TTx], d dialect.Driver[TTx], err error) bool {
	return b.CrossShard != nil && err != nil && (errors.Is(err, b.CrossShard) || errors.Is(d.Dialect().Classify(err), b.CrossShard))
}

// DefaultScope is the scope of the suite's requests where a case names
// none.
const DefaultScope = "tenant-1 POST /orders"

// CommitBreaker is a driver whose connections break, once armed, right
// after the next COMMIT was sent: the server may or may not have committed,
// and the client cannot know.
type CommitBreaker[TTx any] struct {
	// Driver runs on the same database as the Backend's Open.
	Driver dialect.Driver[TTx]
	// Arm makes the next COMMIT sent on Driver's connections break its
	// connection once the statement has left.
	Arm func()
	// Broken reports how many connections were broken so far.
	Broken func() int
}

// LegacyInserter returns a Backend.InsertLegacy that runs insert once per
// row: insert is an INSERT into the table named by its %s, whose eight
// arguments are scope, key, fingerprint, status, header, body, created_at
// and expires_at, with times encoded by encodeTime (as the first schema
// version stored them). A pending row has NULL status, header and body; a
// completed one an empty header.
func LegacyInserter(insert string, encodeTime func(time.Time) any) func(ctx context.Context, q dialect.Queryer, table string, rows []LegacyRecord) error {
	return func(ctx context.Context, q dialect.Queryer, table string, rows []LegacyRecord) error {
		for _, r := range rows {
			var status, header, body any
			if r.Status != nil {
				status, header, body = *r.Status, []byte{}, r.Body
			}
			_, err := q.Exec(ctx, fmt.Sprintf(insert, table), r.Scope, r.Key, r.Fingerprint, status, header, body,
				encodeTime(r.CreatedAt), encodeTime(r.ExpiresAt))
			if err != nil {
				return err
			}
		}
		return nil
	}
}

// LegacyRecord is a record as the first schema version held it.
type LegacyRecord struct {
	Scope, Key  string
	Fingerprint []byte
	// Status is nil while pending; Body is the stored body then.
	Status               *int
	Body                 []byte
	CreatedAt, ExpiresAt time.Time
}

// Case is one test of a suite.
type Case[TTx any] struct {
	Name string
	Run  func(t *testing.T, b Backend[TTx])
}

// RunCases runs cases against b as parallel subtests of t.
func RunCases[TTx any](t *testing.T, b Backend[TTx], cases []Case[TTx]) {
	t.Helper()
	if b.Open == nil {
		t.Fatalf("conformance: Backend %q has no Open", b.Name)
	}
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			t.Parallel()
			c.Run(t, b)
		})
	}
}

// CaseTimeout bounds every case's context, so a backend that hangs fails
// instead.
const CaseTimeout = 2 * time.Minute

// DefaultWaitBound is the store's wait bound in a fixture whose Config sets
// none: generous, since -race on two cores is slow, and short of
// CaseTimeout.
const DefaultWaitBound = 20 * time.Second

// Fixture is one case's world on a backend: a driver, a store on a fresh
// table of its own (migrated, and dropped when the case ends), and a context
// bounded by CaseTimeout. Its failure messages name the backend and the key.
type Fixture[TTx any] struct {
	T *testing.T
	// Backend is the Backend's Name.
	Backend string
	Ctx     context.Context
	Driver  dialect.Driver[TTx]
	Store   *idem.Store[TTx]
	// Table is the store's table.
	Table string

	routeTable func(t *testing.T, q dialect.Queryer, table, scopeColumn string)
}

// FixtureOptions change a fixture.
type FixtureOptions[TTx any] struct {
	// Config is the store's configuration. Its Table is set by the
	// fixture; a zero WaitBound becomes DefaultWaitBound.
	Config idem.Config
	// Wrap, when set, wraps the backend's driver before the store is made
	// (a fault injector, a tracer).
	Wrap func(dialect.Driver[TTx]) dialect.Driver[TTx]
}

var tableSeq atomic.Int64

// tablePrefix keeps the tables of concurrent test binaries on one server
// apart.
var tablePrefix = func() string {
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	return "idemt_" + hex.EncodeToString(b)
}()

// NewFixture opens the backend, makes a store on a fresh table and migrates
// it (twice: Migrate must be idempotent), after Backend.Migrate when set. The migration runs on the
// backend's own driver, so a Wrap that injects faults meets only the case's
// transactions.
func NewFixture[TTx any](t *testing.T, b Backend[TTx], o FixtureOptions[TTx]) *Fixture[TTx] {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), CaseTimeout)
	t.Cleanup(cancel)
	d := b.Open(t)
	f := &Fixture[TTx]{T: t, Backend: b.Name, Ctx: ctx, Driver: d, routeTable: b.RouteTable}
	f.Table = fmt.Sprintf("%s_%d", tablePrefix, tableSeq.Add(1))
	cfg := o.Config
	cfg.Table = f.Table
	if cfg.WaitBound == 0 {
		cfg.WaitBound = DefaultWaitBound
	}
	store, err := idem.New(d, cfg)
	if err != nil {
		t.Fatalf("[%s] idem.New: %v", b.Name, err)
	}
	f.dropAtCleanup(f.Table, f.Table+"_schema", f.Table+"_fence")
	if b.Migrate != nil {
		b.Migrate(t, d, f.Table)
		v, err := store.Version(ctx)
		if err != nil || v.Current != v.Latest {
			t.Fatalf("[%s] Version of a table Backend.Migrate made: %+v, %v; want the latest version recorded", b.Name, v, err)
		}
	}
	for range 2 {
		if err := store.Migrate(ctx); err != nil {
			t.Fatalf("[%s] Migrate: %v", b.Name, err)
		}
	}
	if o.Wrap != nil {
		f.Driver = o.Wrap(d)
		if store, err = idem.New(f.Driver, cfg); err != nil {
			t.Fatalf("[%s] idem.New on the wrapped driver: %v", b.Name, err)
		}
	}
	f.Store = store
	return f
}

// dropAtCleanup drops tables when the case ends, in the order given.
func (f *Fixture[TTx]) dropAtCleanup(tables ...string) {
	f.T.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for _, name := range tables {
			if _, err := f.Driver.Pool().Exec(ctx, "DROP TABLE IF EXISTS "+name); err != nil {
				f.T.Errorf("[%s] drop %s: %v", f.Backend, name, err)
			}
		}
	})
}

// CreateTable creates the table <Table>_<suffix> with the given column
// definitions, dropped when the case ends, and returns its name. Cases keep
// their effects (a user's order rows, say) in such a table; its rows belong
// to records of DefaultScope, beside which a sharded backend keeps them
// (Backend.RouteTable).
func (f *Fixture[TTx]) CreateTable(suffix, columns string) string {
	f.T.Helper()
	return f.createTable(suffix, columns, "")
}

// CreateScopedTable is CreateTable for a table whose rows belong to
// records of several scopes: its column scope, which columns must define,
// holds each row's, and a sharded backend keeps each row beside the
// records of its scope.
func (f *Fixture[TTx]) CreateScopedTable(suffix, columns string) string {
	f.T.Helper()
	return f.createTable(suffix, columns, "scope")
}

func (f *Fixture[TTx]) createTable(suffix, columns, scopeColumn string) string {
	f.T.Helper()
	name := f.Table + "_" + suffix
	f.Exec(f.Driver.Pool(), "CREATE TABLE "+name+" ("+columns+")")
	f.dropAtCleanup(name)
	if f.routeTable != nil {
		f.routeTable(f.T, f.Driver.Pool(), name, scopeColumn)
	}
	return name
}

// Fatalf fails the case, naming the backend and the key.
func (f *Fixture[TTx]) Fatalf(key, format string, args ...any) {
	f.T.Helper()
	f.T.Fatalf("[%s] key %q: %s", f.Backend, key, fmt.Sprintf(format, args...))
}

// Errorf reports a failure, naming the backend and the key, and goes on.
func (f *Fixture[TTx]) Errorf(key, format string, args ...any) {
	f.T.Helper()
	f.T.Errorf("[%s] key %q: %s", f.Backend, key, fmt.Sprintf(format, args...))
}

// Exec runs a statement on q, failing the case on error.
func (f *Fixture[TTx]) Exec(q dialect.Queryer, stmt string) {
	f.T.Helper()
	if _, err := q.Exec(f.Ctx, stmt); err != nil {
		f.T.Fatalf("[%s] %s: %v", f.Backend, stmt, err)
	}
}

// Count runs a query returning one integer on the pool.
func (f *Fixture[TTx]) Count(query string) int64 {
	f.T.Helper()
	rows, err := f.Driver.Pool().Query(f.Ctx, query)
	if err != nil {
		f.T.Fatalf("[%s] %s: %v", f.Backend, query, err)
	}
	defer rows.Close()
	var n int64
	if !rows.Next() {
		f.T.Fatalf("[%s] %s: no row (%v)", f.Backend, query, rows.Err())
	}
	if err := rows.Scan(&n); err != nil {
		f.T.Fatalf("[%s] %s: %v", f.Backend, query, err)
	}
	return n
}

// Records counts the rows of the store's table, expired or not.
func (f *Fixture[TTx]) Records() int64 {
	f.T.Helper()
	return f.Count("SELECT COUNT(*) FROM " + f.Table)
}

// Begin starts a transaction through the driver, for cases that drive
// Store.Claim themselves.
func (f *Fixture[TTx]) Begin() dialect.Tx[TTx] {
	f.T.Helper()
	tx, err := f.Driver.Begin(f.Ctx, dialect.BeginOptions{WaitBound: f.Store.Config().WaitBound})
	if err != nil {
		f.T.Fatalf("[%s] Begin: %v", f.Backend, err)
	}
	return tx
}
