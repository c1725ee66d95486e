package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/dialect"
)

// TestQueriesBoundByName runs every method of the dialect that uses the
// catalog (queries/) on a recording Queryer, with a distinct value for
// every field: each statement of the catalog must run, with its
// parameters bound by the names its call site gives (Args refuses a
// missing, extra or unknown name) to the values those names stand for.
func TestQueriesBoundByName(t *testing.T) {
	tbl, err := dialect.NewTable("idem_catalog")
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2031, 3, 14, 12, 0, 0, 0, time.UTC)
	// The value each parameter name stands for.
	want := map[string]any{
		"scope": "the-scope", "key": "the-key", "fingerprint": []byte("fp"),
		"now": at.UnixMicro(), "retention_us": int64(3600e6), "lease_us": int64(60e6),
		"token": int64(41), "status": 201, "header": []byte("hdr"), "body": []byte("body"),
		"step": "charged", "step_data": []byte("ch_1"), "limit": 17,
		"keys": `[["the-scope","the-key","6670"]]`, "lost": `[["the-scope","the-key"]]`,
	}
	var (
		fence   = dialect.FenceArgs{Scope: "the-scope", Key: "the-key", Token: 41, Fingerprint: []byte("fp"), Now: at, Lease: time.Minute}
		lease   = dialect.LeaseArgs{Scope: "the-scope", Key: "the-key", Fingerprint: []byte("fp"), Now: at, Retention: time.Hour, Lease: time.Minute}
		ctx     = t.Context()
		d       = newDialect()
		s       = d.stmts.For(tbl)
		rec     = &recorder{purge: s.purge.SQL, none: s.complete.SQL, ran: map[string][]any{}}
		methods = map[string]func() error{
			"Claim": func() error {
				_, err := d.Claim(ctx, rec, tbl, dialect.ClaimArgs{Scope: "the-scope", Key: "the-key", Fingerprint: []byte("fp"), Now: at, Retention: time.Hour})
				return err
			},
			"ClaimBatch": func() error {
				_, err := d.ClaimBatch(ctx, rec, tbl, dialect.BatchClaimArgs{Keys: []dialect.BatchKey{{Scope: "the-scope", Key: "the-key", Fingerprint: []byte("fp")}},
					Now: at, Retention: time.Hour})
				return err
			},
			"Complete": func() error {
				return d.Complete(ctx, rec, tbl, dialect.CompleteArgs{Scope: "the-scope", Key: "the-key", Fingerprint: []byte("fp"),
					Status: 201, Header: []byte("hdr"), Body: []byte("body"), Now: at, Retention: time.Hour})
			},
			"Lookup": func() error {
				_, _, err := d.Lookup(ctx, rec, tbl, dialect.LookupArgs{Scope: "the-scope", Key: "the-key", Now: at})
				return err
			},
			"Purge": func() error {
				_, err := d.Purge(ctx, rec, tbl, dialect.PurgeArgs{Now: at, Limit: 17})
				return err
			},
			"InsertLease": func() error { _, err := d.InsertLease(ctx, rec, tbl, lease); return err },
			"TakeExpired": func() error { _, err := d.TakeExpired(ctx, rec, tbl, lease); return err },
			"ResumeLease": func() error { _, err := d.ResumeLease(ctx, rec, tbl, lease); return err },
			"ExtendLease": func() error { _, err := d.ExtendLease(ctx, rec, tbl, fence); return err },
			"RecordStep": func() error {
				_, err := d.RecordStep(ctx, rec, tbl, dialect.StepArgs{FenceArgs: fence, Step: "charged", Data: []byte("ch_1")})
				return err
			},
			"CompleteLease": func() error {
				return d.CompleteLease(ctx, rec, tbl, dialect.CompleteLeaseArgs{FenceArgs: fence,
					Status: 201, Header: []byte("hdr"), Body: []byte("body"), Retention: time.Hour})
			},
			"ReleaseLease": func() error { return d.ReleaseLease(ctx, rec, tbl, fence) },
			"ExpiredLeases": func() error {
				_, err := d.ExpiredLeases(ctx, rec, tbl, dialect.ExpiredLeasesArgs{Now: at, Limit: 17})
				return err
			},
		}
	)
	for name, run := range methods {
		// The recorder finds no rows and changes one: some methods then
		// report a lost claim or lease. An error from Args would name the
		// statement and wrap ErrInvalidConfig.
		if err := run(); dialectBug(err) {
			t.Errorf("%s: %v", name, err)
		}
	}

	catalog := dialect.MustLoadQueries(queries, "queries", tbl, dialect.Question)
	for name, q := range map[string]dialect.Query{
		"claim": s.claim, "complete": s.complete, "complete_late": s.completeLate, "read": s.read, "purge": s.purge, "raise_floor": s.raiseFloor,
		"claim_batch": s.claimBatch, "read_batch": s.readBatch,
		"lease_insert": s.lease.insert, "lease_take_expired": s.lease.takeExpired, "lease_resume": s.lease.resume,
		"lease_extend": s.lease.extend, "lease_step": s.lease.step, "lease_complete": s.lease.complete,
		"lease_release": s.lease.release, "lease_expired": s.lease.expired,
	} {
		if q.Name != name || q.SQL != catalog[name].SQL {
			t.Errorf("statement %s is queries/%s.sql, want queries/%s.sql", name, q.Name, name)
		}
		delete(catalog, name)
		got, ran := rec.ran[q.SQL]
		if !ran {
			t.Errorf("%s: no method ran it", name)
			continue
		}
		var named []sql.NamedArg
		for _, p := range q.Params() {
			v, ok := want[p]
			if !ok {
				t.Errorf("%s: parameter @%s has no value in this test", name, p)
			}
			named = append(named, sql.Named(p, v))
		}
		expected, err := q.Args(named...)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, expected) {
			t.Errorf("%s (@%v) ran with %v, want %v", name, q.Params(), got, expected)
		}
	}
	// The schema's statements run through dialect.Migrate, which binds
	// RecordVersion by position: @version, then @name.
	for name, sqlText := range map[string]string{
		"schema_create_version_table": s.schema.CreateVersionTable,
		"schema_read_version":         s.schema.ReadVersion,
		"schema_record_version":       s.schema.RecordVersion,
	} {
		if sqlText != catalog[name].SQL {
			t.Errorf("Schema's %s is not queries/%s.sql", name, name)
		}
		delete(catalog, name)
	}
	if got := recordedParams(t, "schema_record_version"); !reflect.DeepEqual(got, []string{"version", "name"}) {
		t.Errorf("schema_record_version takes @%v, want @version then @name (Migrate binds them by position)", got)
	}
	for name := range catalog {
		t.Errorf("queries/%s.sql: not checked here", name)
	}
}

func recordedParams(t *testing.T, name string) []string {
	tbl, err := dialect.NewTable("t")
	if err != nil {
		t.Fatal(err)
	}
	return dialect.MustLoadQueries(queries, "queries", tbl, dialect.Question)[name].Params()
}

// dialectBug reports whether err is a binding error rather than the
// outcome of a statement that found nothing.
func dialectBug(err error) bool {
	return errors.Is(err, dialect.ErrInvalidConfig)
}

// recorder is a Queryer that records each statement's arguments. Its
// queries return no rows, except a purge's DELETE ... RETURNING token,
// which returns token 41; its statements change one row.
type recorder struct {
	purge string
	// none is the statement that changes no row (the fast completion, so
	// that the late one runs too).
	none string
	ran  map[string][]any
}

func (r *recorder) Exec(_ context.Context, query string, args ...any) (int64, error) {
	r.ran[query] = args
	if query == r.none {
		return 0, nil
	}
	return 1, nil
}

func (r *recorder) Query(_ context.Context, query string, args ...any) (dialect.Rows, error) {
	r.ran[query] = args
	rows := &tokenRows{}
	if query == r.purge {
		rows.left = 1
	}
	return rows, nil
}

// tokenRows returns left rows of one column, the token 41.
type tokenRows struct{ left int }

func (r *tokenRows) Next() bool {
	if r.left == 0 {
		return false
	}
	r.left--
	return true
}

func (r *tokenRows) Scan(dest ...any) error {
	*dest[0].(*int64) = 41
	return nil
}

func (*tokenRows) Err() error   { return nil }
func (*tokenRows) Close() error { return nil }

// TestQueriesPrepared: every statement of the catalog prepares on a
// migrated database, and the ones a request runs land in the driver's
// prepared-statement cache under their text.
func TestQueriesPrepared(t *testing.T) {
	ctx := t.Context()
	db, err := Open(filepath.Join(t.TempDir(), "idem.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	d, err := New(ctx, db, Options{})
	if err != nil {
		t.Fatal(err)
	}
	store, err := idem.New(d, idem.Config{Table: "idem_prepared", Retention: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	tbl, err := dialect.NewTable("idem_prepared")
	if err != nil {
		t.Fatal(err)
	}
	for name, q := range dialect.MustLoadQueries(queries, "queries", tbl, dialect.Question) {
		s, err := db.PrepareContext(ctx, q.SQL)
		if err != nil {
			t.Errorf("%s does not prepare: %v\n%s", name, err, q.SQL)
			continue
		}
		s.Close()
	}

	req := idem.Request{Scope: "s", Key: "k", Fingerprint: idem.FingerprintRequest("POST", "/", nil)}
	fn := func(context.Context, *sql.Tx) (idem.Response, error) { return idem.Response{Status: 201}, nil }
	// The first run notes claim and complete, the second (a replay) read;
	// each next Begin prepares what was noted.
	for range 3 {
		if _, err := store.Do(ctx, req, fn); err != nil {
			t.Fatal(err)
		}
	}
	s := d.dialect.stmts.For(tbl)
	d.stmts.mu.Lock()
	defer d.stmts.mu.Unlock()
	for name, q := range map[string]dialect.Query{"claim": s.claim, "complete": s.complete, "read": s.read} {
		if d.stmts.stmts[q.SQL] == nil {
			t.Errorf("%s is not in the prepared-statement cache", name)
		}
	}
}

// TestLeaseNeverOutlivesRecord: every statement that sets lease_until
// keeps expires_at at or after it, here at the edge where a new lease would
// run past the record's retention: resumed, extended, stepped.
func TestLeaseNeverOutlivesRecord(t *testing.T) {
	ctx := t.Context()
	db, err := Open(filepath.Join(t.TempDir(), "idem.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	drv, err := New(ctx, db, Options{})
	if err != nil {
		t.Fatal(err)
	}
	store, err := idem.New(drv, idem.Config{Table: "idem_lease_edge", Retention: time.Hour, Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	tbl, err := dialect.NewTable("idem_lease_edge")
	if err != nil {
		t.Fatal(err)
	}
	d := drv.dialect
	t0 := time.Date(2031, 3, 14, 12, 0, 0, 0, time.UTC)
	inTx := func(what string, fn func(q dialect.Queryer) error) {
		t.Helper()
		tx, err := drv.Begin(ctx, dialect.BeginOptions{WaitBound: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if err := fn(tx); err != nil {
			tx.Rollback(ctx)
			t.Fatalf("%s: %v", what, err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	check := func(what string, now time.Time) dialect.Record {
		t.Helper()
		rec, found, err := d.Lookup(ctx, drv.Pool(), tbl, dialect.LookupArgs{Scope: "s", Key: "k", Now: now})
		if err != nil || !found {
			t.Fatalf("%s: Lookup = %v, %v", what, found, err)
		}
		if rec.ExpiresAt.Before(rec.LeaseUntil) {
			t.Errorf("%s: the record expires at %v, before its lease ends at %v", what, rec.ExpiresAt, rec.LeaseUntil)
		}
		return rec
	}
	lease := dialect.LeaseArgs{Scope: "s", Key: "k", Fingerprint: []byte("fp"), Now: t0, Retention: time.Hour, Lease: time.Minute}
	inTx("InsertLease", func(q dialect.Queryer) error {
		if won, err := d.InsertLease(ctx, q, tbl, lease); err != nil || !won {
			return fmt.Errorf("won %v, %w", won, err)
		}
		return nil
	})
	// The lease lapsed; resumed 30 s before the record's end, a lease of a
	// minute runs 30 s past it.
	lease.Now = t0.Add(time.Hour - 30*time.Second)
	inTx("ResumeLease", func(q dialect.Queryer) error {
		if won, err := d.ResumeLease(ctx, q, tbl, lease); err != nil || !won {
			return fmt.Errorf("won %v, %w", won, err)
		}
		return nil
	})
	rec := check("resumed", lease.Now)
	fence := dialect.FenceArgs{Scope: "s", Key: "k", Token: rec.Token, Fingerprint: []byte("fp"), Lease: time.Minute}
	fence.Now = rec.ExpiresAt.Add(-10 * time.Second)
	inTx("ExtendLease", func(q dialect.Queryer) error { _, err := d.ExtendLease(ctx, q, tbl, fence); return err })
	rec = check("extended", fence.Now)
	fence.Now = rec.ExpiresAt.Add(-10 * time.Second)
	inTx("RecordStep", func(q dialect.Queryer) error {
		_, err := d.RecordStep(ctx, q, tbl, dialect.StepArgs{FenceArgs: fence, Step: "charged", Data: []byte("ch_1")})
		return err
	})
	check("stepped", fence.Now)
}
