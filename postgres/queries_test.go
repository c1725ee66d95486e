package postgres

import (
	"context"
	"errors"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem/dialect"
)

// TestCatalog loads queries/ for a table and runs every method of the
// dialect against a queryer that scripts the database's answers, so that
// each call site binds its statements: the strict Query.Args fails on a
// name the statement lacks or needs. Every statement of the catalog must be
// run by some call site (the schema's are bound by dialect.Migrate, in
// Schema's documented order).
func TestCatalog(t *testing.T) {
	tbl, err := dialect.NewTable("idem_catalog")
	if err != nil {
		t.Fatal(err)
	}
	catalog, err := dialect.LoadQueries(queriesFS, "queries", tbl, dialect.Dollar)
	if err != nil {
		t.Fatal(err)
	}
	s := newStatements(tbl) // panics on a statement without a field
	byText := map[string]string{}
	for name, q := range catalog {
		if prev, dup := byText[q.SQL]; dup {
			t.Fatalf("%s and %s render the same text", prev, name)
		}
		byText[q.SQL] = name
		if strings.Contains(q.SQL, "@") || strings.Contains(q.SQL, "{{") {
			t.Errorf("%s: a parameter or template left in %q", name, q.SQL)
		}
		if strings.Contains(q.SQL, "<no value>") {
			t.Errorf("%s: a template part rendered without its data: %q", name, q.SQL)
		}
	}

	// The schema's statements are run by dialect.Migrate with positional
	// arguments: RecordVersion's are the version and the name.
	for name, want := range map[string][]string{
		"schema_lock": nil, "schema_create_version_table": nil, "schema_read_version": nil, "schema_record_version": {"version", "name"},
	} {
		if got := catalog[name].Params(); !slices.Equal(got, want) {
			t.Errorf("%s takes %v, Migrate binds %v", name, got, want)
		}
	}
	if s.schema.RecordVersion != catalog["schema_record_version"].SQL {
		t.Errorf("Schema.RecordVersion is not queries/schema_record_version.sql")
	}

	// The admin's purge wraps its own DELETE in raisingFloor: purge.sql
	// must be the same wrapper around its DELETE.
	purge := catalog["purge"].SQL
	del, ok := strings.CutPrefix(purge, "WITH gone AS (")
	if i := strings.Index(del, "),\nraised AS ("); ok && i > 0 {
		del = del[:i]
	}
	if raisingFloor(del, s.fence) != purge {
		t.Errorf("purge.sql is not raisingFloor around its DELETE:\n%s\nwant\n%s", purge, raisingFloor(del, s.fence))
	}

	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	live := []any{"s", "k", []byte("fp"), nil, nil, nil, now, now.Add(time.Hour), false, int64(1), nil, nil, nil, nil}
	expired := slices.Clone(live)
	expired[8] = true
	fq := &scriptedQueryer{t: t, byText: byText, ran: map[string]bool{}, answers: map[string]answer{
		"peek":           {rows: [][]any{expired}},
		"peek_batch":     {rows: [][]any{expired}},
		"complete_batch": {affected: 1},
		"read":           {rows: [][]any{live}},
		"purge":          {rows: [][]any{{int64(3)}}},
		"lease_insert":   {rows: [][]any{{true}}},
		"lease_extend":   {rows: [][]any{{now}}},
		"lease_step":     {rows: [][]any{{now}}},
		"lease_expired":  {rows: [][]any{live}},
		"complete":       {affected: 1}, "lease_take_expired": {affected: 1}, "lease_resume": {affected: 1},
		"lease_complete": {affected: 1}, "lease_release": {affected: 1},
	}}
	ctx := context.Background()
	d := newDialect()
	fence := dialect.FenceArgs{Scope: "s", Key: "k", Token: 1, Fingerprint: []byte("fp"), Lease: time.Second}
	lease := dialect.LeaseArgs{Scope: "s", Key: "k", Fingerprint: []byte("fp"), Retention: time.Hour, Lease: time.Second, WaitBound: time.Second}
	complete := dialect.CompleteArgs{Scope: "s", Key: "k", Fingerprint: []byte("fp"), Status: 200, Retention: time.Hour}
	for name, run := range map[string]func() error{
		// The claim loses to an expired record, fails to take it over and
		// reads the live record that did: every statement of the claim.
		"Claim": func() error {
			res, err := d.Claim(ctx, fq, tbl, dialect.ClaimArgs{Scope: "s", Key: "k", Fingerprint: []byte("fp"), Retention: time.Hour, WaitBound: time.Second})
			if err == nil && (res.Won || res.Record.Key != "k") {
				err = errors.New("the claim did not find the live record")
			}
			return err
		},
		// The batch claim loses its key to an expired record, fails to
		// take it over and reads the live record that did.
		"ClaimBatch": func() error {
			res, err := d.ClaimBatch(ctx, fq, tbl, dialect.BatchClaimArgs{Keys: []dialect.BatchKey{{Scope: "s", Key: "k", Fingerprint: []byte("fp")}},
				Retention: time.Hour, WaitBound: time.Second})
			if err == nil && (res[0].Won || res[0].Record.Key != "k") {
				err = errors.New("the batch claim did not find the live record")
			}
			return err
		},
		"CompleteBatch":          func() error { return d.CompleteBatch(ctx, fq, tbl, []dialect.CompleteArgs{complete}) },
		"CompleteBatch deferred": func() error { return d.CompleteBatch(ctx, deferringQueryer{fq}, tbl, []dialect.CompleteArgs{complete}) },
		"Complete":               func() error { return d.Complete(ctx, fq, tbl, complete) },
		"Complete deferred":      func() error { return d.Complete(ctx, deferringQueryer{fq}, tbl, complete) },
		"Lookup": func() error {
			_, found, err := d.Lookup(ctx, fq, tbl, dialect.LookupArgs{Scope: "s", Key: "k", Now: now})
			if err == nil && !found {
				err = errors.New("not found")
			}
			return err
		},
		"Purge": func() error {
			n, err := d.Purge(ctx, fq, tbl, dialect.PurgeArgs{Now: now, Limit: 10})
			if err == nil && n != 3 {
				err = errors.New("wrong count")
			}
			return err
		},
		"InsertLease": func() error { _, err := d.InsertLease(ctx, fq, tbl, lease); return err },
		"TakeExpired": func() error { _, err := d.TakeExpired(ctx, fq, tbl, lease); return err },
		"ResumeLease": func() error { _, err := d.ResumeLease(ctx, fq, tbl, lease); return err },
		"ExtendLease": func() error { _, err := d.ExtendLease(ctx, fq, tbl, fence); return err },
		"RecordStep": func() error {
			_, err := d.RecordStep(ctx, fq, tbl, dialect.StepArgs{FenceArgs: fence, Step: "x", Data: []byte("d")})
			return err
		},
		"CompleteLease": func() error {
			return d.CompleteLease(ctx, fq, tbl, dialect.CompleteLeaseArgs{FenceArgs: fence, Status: 200, Retention: time.Hour})
		},
		"ReleaseLease": func() error { return d.ReleaseLease(ctx, fq, tbl, fence) },
		"ExpiredLeases": func() error {
			recs, err := d.ExpiredLeases(ctx, fq, tbl, dialect.ExpiredLeasesArgs{Now: now, Limit: 10})
			if err == nil && len(recs) != 1 {
				err = errors.New("wrong records")
			}
			return err
		},
	} {
		if err := run(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	for name := range catalog {
		if !fq.ran[name] && !strings.HasPrefix(name, "schema_") {
			t.Errorf("no call site ran %s", name)
		}
	}
}

// answer is what a scripted statement returns.
type answer struct {
	rows     [][]any
	affected int64
}

// scriptedQueryer answers the catalog's statements from a script and
// checks that each gets as many arguments as its text has placeholders.
type scriptedQueryer struct {
	t       *testing.T
	byText  map[string]string
	ran     map[string]bool
	answers map[string]answer
}

var placeholder = regexp.MustCompile(`\$([0-9]+)`)

func (q *scriptedQueryer) statement(query string, args []any) answer {
	q.t.Helper()
	name, ok := q.byText[query]
	if !ok {
		q.t.Fatalf("a statement not in the catalog: %s", query)
	}
	q.ran[name] = true
	n := 0
	for _, m := range placeholder.FindAllStringSubmatch(query, -1) {
		i, _ := strconv.Atoi(m[1])
		n = max(n, i)
	}
	if n != len(args) {
		q.t.Errorf("%s: %d placeholders, %d arguments", name, n, len(args))
	}
	return q.answers[name]
}

func (q *scriptedQueryer) Exec(_ context.Context, query string, args ...any) (int64, error) {
	return q.statement(query, args).affected, nil
}

func (q *scriptedQueryer) Query(_ context.Context, query string, args ...any) (dialect.Rows, error) {
	return &scriptedRows{rows: q.statement(query, args).rows}, nil
}

// deferringQueryer takes the statement meant to go with COMMIT.
type deferringQueryer struct{ *scriptedQueryer }

func (q deferringQueryer) DeferToCommit(s dialect.Statement) bool {
	q.statement(s.SQL, s.Args)
	return true
}

// scriptedRows scans scripted values; a nil value leaves a pointer
// destination nil.
type scriptedRows struct {
	rows [][]any
	cur  []any
}

func (r *scriptedRows) Next() bool {
	if len(r.rows) == 0 {
		return false
	}
	r.cur, r.rows = r.rows[0], r.rows[1:]
	return true
}

func (r *scriptedRows) Scan(dest ...any) error {
	if len(dest) != len(r.cur) {
		return errors.New("scan: wrong number of columns")
	}
	for i, v := range r.cur {
		d := reflect.ValueOf(dest[i]).Elem()
		switch {
		case v == nil:
			d.SetZero()
		case d.Kind() == reflect.Pointer && d.Type() != reflect.TypeOf(v):
			p := reflect.New(d.Type().Elem())
			p.Elem().Set(reflect.ValueOf(v).Convert(d.Type().Elem()))
			d.Set(p)
		default:
			d.Set(reflect.ValueOf(v).Convert(d.Type()))
		}
	}
	return nil
}

func (r *scriptedRows) Err() error   { return nil }
func (r *scriptedRows) Close() error { return nil }
