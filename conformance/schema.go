package conformance

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/dialect"
)

// freshStore makes a store on a table of its own that nothing has
// migrated, dropped (with its version table) when the case ends.
func (e *env[TTx]) freshStore(suffix string) (*idem.Store[TTx], dialect.Table) {
	e.T.Helper()
	name := e.Table + "_" + suffix
	table, err := dialect.NewTable(name)
	if err != nil {
		e.T.Fatalf("[%s] table %s: %v", e.Backend, name, err)
	}
	cfg := e.Store.Config()
	cfg.Table = name
	store, err := idem.New(e.Driver, cfg)
	if err != nil {
		e.T.Fatalf("[%s] idem.New: %v", e.Backend, err)
	}
	e.dropAtCleanup(name, table.Index("schema"), table.Index("fence"))
	return store, table
}

// execInTx runs one statement in a transaction of the driver's and commits
// it, where a bare statement on the pool would do: a cluster node that reads
// causally (Galera with wsrep_sync_wait=1) applies every earlier commit at
// BEGIN, where the bare statement may run on a node that has not yet applied
// what it depends on. what names the statement in a failure.
func (e *env[TTx]) execInTx(key, what, query string, args ...any) {
	e.T.Helper()
	tx := e.Begin()
	if _, err := tx.Exec(e.Ctx, query, args...); err != nil {
		tx.Rollback(e.Ctx)
		e.Fatalf(key, "%s: %v", what, err)
	}
	if err := tx.Commit(e.Ctx); err != nil {
		e.Fatalf(key, "commit of %s: %v", what, err)
	}
}

// testMigrateUpgradesUnversioned: a table made by the first version of the
// schema (its DDL run by hand, nothing recorded) and holding records, written
// the way that version wrote them, is upgraded in place: Migrate records it
// as version 1 and applies what follows, and every record still replays or
// blocks as before.
func testMigrateUpgradesUnversioned[TTx any](t *testing.T, b Backend[TTx]) {
	e := setup(t, b, idem.Config{})
	store, table := e.freshStore("legacy")
	schema := e.Driver.Dialect().Schema(table)
	if len(schema.Migrations) == 0 {
		e.T.Fatalf("[%s] the dialect's schema has no migration", e.Backend)
	}
	for _, stmt := range schema.Migrations[0].Statements {
		e.Exec(e.Driver.Pool(), stmt)
	}
	done, pending := request("legacy-done", "x"), request("legacy-pending", "x")
	if len(schema.Migrations) > 1 {
		if b.InsertLegacy == nil {
			e.T.Fatalf("[%s] the schema has %d versions: set Backend.InsertLegacy so the upgrade from version 1 is tested with data in it", e.Backend, len(schema.Migrations))
		}
		created := 201
		now := time.Now().UTC().Truncate(time.Microsecond)
		err := b.InsertLegacy(e.Ctx, e.Driver.Pool(), table.Name(), []LegacyRecord{
			{Scope: done.Scope, Key: done.Key, Fingerprint: done.Fingerprint[:], Status: &created, Body: []byte("kept"),
				CreatedAt: now.Add(-time.Minute), ExpiresAt: now.Add(time.Hour)},
			{Scope: pending.Scope, Key: pending.Key, Fingerprint: pending.Fingerprint[:],
				CreatedAt: now.Add(-time.Minute), ExpiresAt: now.Add(time.Hour)},
		})
		if err != nil {
			e.T.Fatalf("[%s] InsertLegacy: %v", e.Backend, err)
		}
	} else {
		// One version: the current statements are the first version's.
		e.do(store, done, e.work("legacy-done", created("kept")))
		tx := e.Begin()
		if c, err := store.Claim(e.Ctx, tx.Native(), pending); err != nil || c.Outcome != idem.Won {
			tx.Rollback(e.Ctx)
			e.Fatalf(pending.Key, "Claim: %+v, %v", c, err)
		}
		if err := tx.Commit(e.Ctx); err != nil {
			e.Fatalf(pending.Key, "commit of a claim left pending: %v", err)
		}
	}

	if err := store.Migrate(e.Ctx); err != nil {
		e.Fatalf("", "Migrate of a table an earlier version made: %v", err)
	}
	v, err := store.Version(e.Ctx)
	if err != nil || v.Current != v.Latest || v.Latest != len(schema.Migrations) {
		e.Fatalf("", "Version after the upgrade: %+v, %v, want the latest, %d", v, err, len(schema.Migrations))
	}
	if r := e.do(store, done, e.work("legacy-done", created("again"))); r.Outcome != idem.Replay || string(r.Response.Body) != "kept" || r.Response.Status != 201 {
		e.Fatalf(done.Key, "after the upgrade: %v %d %q, want a replay of the stored answer", r.Outcome, r.Response.Status, r.Response.Body)
	}
	if r := e.do(store, pending, e.work("legacy-pending", created("x"))); r.Outcome != idem.InFlight {
		e.Fatalf(pending.Key, "after the upgrade: %v, want in-flight (the pending record survived)", r.Outcome)
	}
	if r := e.do(store, request("legacy-new", "x"), e.work("legacy-new", created("new"))); r.Outcome != idem.Won || !r.Committed {
		e.Fatalf("legacy-new", "a new key after the upgrade: %v, want won", r.Outcome)
	}
	if n := e.effectCount("legacy-done"); n > 1 {
		e.Fatalf(done.Key, "effects = %d, want at most 1", n)
	}
}

// testMigrateAfterCrashBeforeVersion: a step whose DDL is in place but whose
// version was never recorded (on a database whose DDL commits on its own, a
// crash between the two leaves it so) is recorded by the next Migrate,
// which does not fail on what is already there; the records survive. Every
// step from version k on is left so, for each k.
func testMigrateAfterCrashBeforeVersion[TTx any](t *testing.T, b Backend[TTx]) {
	e := setup(t, b, idem.Config{})
	latest := len(e.Driver.Dialect().Schema(mustTable(e, e.Table)).Migrations)
	for k := 1; k <= latest; k++ {
		store, table := e.freshStore(fmt.Sprintf("crash%d", k))
		if err := store.Migrate(e.Ctx); err != nil {
			e.Fatalf("", "Migrate: %v", err)
		}
		req := request(fmt.Sprintf("crash-%d", k), "x")
		e.do(store, req, e.work("crash", created("kept")))
		// The DELETE must meet all the versions Migrate recorded (a bare
		// statement on a cluster node still applying them deletes only
		// some). It names each version, so that a sharded backend finds
		// them on the shard it keeps them on, with no scan of the others.
		e.execInTx(req.Key, fmt.Sprintf("delete versions %d..%d", k, latest),
			fmt.Sprintf("DELETE FROM %s WHERE version IN (%s)", table.Index("schema"), versionsFrom(k, latest)))
		if err := store.Migrate(e.Ctx); err != nil {
			e.Fatalf(req.Key, "Migrate with versions %d..%d in place but not recorded: %v", k, latest, err)
		}
		if v, err := store.Version(e.Ctx); err != nil || v.Current != latest {
			e.Fatalf(req.Key, "Version after the repair: %+v, %v, want %d", v, err, latest)
		}
		if got := e.Count("SELECT COUNT(*) FROM " + table.Index("schema")); got != int64(latest) {
			e.Fatalf(req.Key, "%d versions recorded, want %d", got, latest)
		}
		if r := e.do(store, req, e.work("crash", created("again"))); r.Outcome != idem.Replay || string(r.Response.Body) != "kept" {
			e.Fatalf(req.Key, "after the repair: %v %q, want the record replayed", r.Outcome, r.Response.Body)
		}
	}
}

// testMigrateRefusesNewer: a database whose recorded version is newer than
// the code's is refused, so an old binary never writes to a schema it does
// not know.
func testMigrateRefusesNewer[TTx any](t *testing.T, b Backend[TTx]) {
	e := setup(t, b, idem.Config{})
	schema := e.Driver.Dialect().Schema(mustTable(e, e.Table))
	next := len(schema.Migrations) + 1
	// The version table is setup's Migrate's: a cluster node still
	// applying that DDL has no such table yet.
	e.execInTx("", fmt.Sprintf("record version %d", next), schema.RecordVersion, next, "from_the_future")
	err := e.Store.Migrate(e.Ctx)
	if !errors.Is(err, idem.ErrSchemaNewer) {
		e.Fatalf("", "Migrate of a database at version %d (code knows %d) = %v, want ErrSchemaNewer", next, next-1, err)
	}
	if _, err := e.Store.Version(e.Ctx); !errors.Is(err, idem.ErrSchemaNewer) {
		e.Fatalf("", "Version of a newer database = %v, want ErrSchemaNewer", err)
	}
}

// testMigrateConcurrently: several processes migrating one fresh table at
// once all succeed, and every version is applied exactly once.
func testMigrateConcurrently[TTx any](t *testing.T, b Backend[TTx]) {
	const n = 6
	e := setup(t, b, idem.Config{})
	store, table := e.freshStore("racing")
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() { errs[i] = store.Migrate(e.Ctx) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			e.Errorf("", "Migrate %d of %d at once: %v", i+1, n, err)
		}
	}
	latest := len(e.Driver.Dialect().Schema(table).Migrations)
	if got := e.Count("SELECT COUNT(*) FROM " + table.Index("schema")); got != int64(latest) {
		e.Fatalf("", "%d versions recorded after %d concurrent migrations, want %d (each once)", got, n, latest)
	}
	if r := e.do(store, request("raced", "x"), e.work("raced", created("ok"))); r.Outcome != idem.Won {
		e.Fatalf("raced", "Do on the migrated table: %v, want won", r.Outcome)
	}
}

func mustTable[TTx any](e *env[TTx], name string) dialect.Table {
	e.T.Helper()
	table, err := dialect.NewTable(name)
	if err != nil {
		e.T.Fatalf("[%s] %v", e.Backend, fmt.Errorf("table %s: %w", name, err))
	}
	return table
}

// versionsFrom lists the versions from..to, comma-separated.
func versionsFrom(from, to int) string {
	var b strings.Builder
	for v := from; v <= to; v++ {
		if v > from {
			b.WriteString(", ")
		}
		b.WriteString(strconv.Itoa(v))
	}
	return b.String()
}
