package mysql

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	mysqldriver "github.com/go-sql-driver/mysql"

	"github.com/idemkit/idem/dialect"
)

// On MariaDB each of the claim's statements carries its lock wait bound
// and, where the server has innodb_snapshot_isolation, turns it off, so a
// loser reads the latest committed record whatever its snapshot. Behind
// vtgate each carries a query timeout of whole seconds (in milliseconds),
// after its first word, where vtgate reads it.
func TestBoundedClaimStatements(t *testing.T) {
	table, _ := dialect.NewTable("t")
	prefix := func(p string) func(string) string { return func(q string) string { return p + q } }
	for _, tc := range []struct {
		name           string
		latest, vitess bool
		wait           time.Duration
		want           func(string) string
	}{
		{"MariaDB", false, false, 5 * time.Second, prefix("SET STATEMENT innodb_lock_wait_timeout=5 FOR ")},
		{"MariaDB, rounded up", false, false, 4200 * time.Millisecond, prefix("SET STATEMENT innodb_lock_wait_timeout=5 FOR ")},
		{"MariaDB 11.8", true, false, 5 * time.Second, prefix("SET STATEMENT innodb_lock_wait_timeout=5, innodb_snapshot_isolation=OFF FOR ")},
		{"vtgate", false, true, 2 * time.Second, func(q string) string {
			verb, rest, _ := strings.Cut(q, " ")
			return verb + " /*vt+ QUERY_TIMEOUT_MS=2000 */ " + rest
		}},
		{"vtgate, rounded up to a second", false, true, 10 * time.Microsecond, func(q string) string {
			verb, rest, _ := strings.Cut(q, " ")
			return verb + " /*vt+ QUERY_TIMEOUT_MS=1000 */ " + rest
		}},
	} {
		d := newDialect(0)
		d.latestLockedReads, d.vitess = tc.latest, tc.vitess
		s := d.stmts.For(table)
		c := d.bounded(table, s, tc.wait)
		for name, pair := range map[string][2]dialect.Query{
			"claim": {c.claim, s.claim.claim}, "peek": {c.peek, s.claim.peek}, "takeover": {c.takeover, s.claim.takeover},
		} {
			if want := tc.want(pair[1].SQL); pair[0].SQL != want || !slices.Equal(pair[0].Params(), pair[1].Params()) {
				t.Errorf("%s: %s %q, want %q", tc.name, name, pair[0].SQL, want)
			}
		}
	}
}

// On Galera lookups are causal reads; elsewhere plain ones.
func TestCausalLookupStatement(t *testing.T) {
	table, _ := dialect.NewTable("t")
	s := newDialect(0).stmts.For(table)
	if s.causalRead.SQL != causalPrefix+s.read.SQL || strings.HasPrefix(s.read.SQL, "SET") {
		t.Errorf("read %q, causal read %q", s.read.SQL, s.causalRead.SQL)
	}
}

// The admin statements build their filters in Go with micros: the same SQL
// as the catalog's part (now is compiled from the part itself).
func TestAdminPartsMatchCatalog(t *testing.T) {
	parts, err := fs.ReadFile(queries, "queries/_parts.sql")
	if err != nil {
		t.Fatal(err)
	}
	table, _ := dialect.NewTable("t")
	q, err := dialect.LoadQueries(fstest.MapFS{
		"q/_parts.sql": {Data: parts},
		"q/x.sql":      {Data: []byte(`{{template "micros" "created_at"}}`)},
	}, "q", table, dialect.Question)
	if err != nil {
		t.Fatal(err)
	}
	if want := micros("created_at"); q["x"].SQL != want {
		t.Errorf("catalog parts %q, Go's %q", q["x"].SQL, want)
	}
}

// The schema statements go to the migration runner, which binds
// RecordVersion's version and name by position.
func TestSchemaStatements(t *testing.T) {
	table, _ := dialect.NewTable("t")
	q := dialect.MustLoadQueries(queries, "queries", table, dialect.Question)
	for name, params := range map[string][]string{
		"schema_lock": nil, "schema_unlock": nil, "schema_create_version_table": nil, "schema_read_version": nil,
		"schema_record_version": {"version", "name"},
	} {
		if got := q[name].Params(); !slices.Equal(got, params) {
			t.Errorf("%s takes %v, want %v", name, got, params)
		}
	}
	if s := newStatements(table).schema; !strings.Contains(s.Lock, "'idem migrate t'") || !strings.Contains(s.RecordVersion, "`t_schema`") {
		t.Errorf("schema statements not rendered for the table: %+v", s)
	}
}

// Every statement of the catalog, run by the method that uses it against a
// scripted connection, on MySQL (the session's lock wait set around a
// claim), on MariaDB (SET STATEMENT) and behind vtgate (a query timeout
// directive), each statement that may wait bounded and no other: each
// call site binds every
// parameter its statement names, by name, and no statement of the catalog
// is left unused. A name missing, misspelt or extra fails the method with
// ErrInvalidConfig before anything is sent.
func TestCatalogBoundByCallSites(t *testing.T) {
	table, _ := dialect.NewTable("t")
	catalog := dialect.MustLoadQueries(queries, "queries", table, dialect.Question)
	now := time.UnixMicro(1_700_000_000_000_000)
	us := now.UnixMicro()
	record := func(expires int64) []any {
		return []any{"s", "k", []byte("fp"), (*int64)(nil), []byte(nil), []byte(nil), us - 10, expires,
			int64(3), &us, []byte("step"), []byte("data"), us}
	}
	live := func(key string) []any {
		r := record(us + 10)
		r[1] = key
		return r
	}
	fenceArgs := dialect.FenceArgs{Scope: "s", Key: "k", Token: 3, Fingerprint: []byte("fp"), Now: now, Lease: time.Second}
	leaseArgs := dialect.LeaseArgs{Scope: "s", Key: "k", Fingerprint: []byte("fp"), Now: now, Retention: time.Hour, Lease: time.Second, WaitBound: time.Second}
	dup := &mysqldriver.MySQLError{Number: erDupEntry}
	ctx := context.Background()

	type answers map[string]answer
	for _, mode := range []string{"MySQL", "MariaDB", "vtgate"} {
		ran := map[string]bool{}
		for _, tc := range []struct {
			name    string
			answers answers
			want    []string // the statements run, in order
			bound   int      // how many of them run with the lock wait bounded
			call    func(d *mysqlDialect, q dialect.Queryer) error
		}{
			{"Claim won", answers{"claim": {n: 1}}, []string{"claim"}, 1, func(d *mysqlDialect, q dialect.Queryer) error {
				_, err := d.Claim(ctx, q, table, dialect.ClaimArgs{Scope: "s", Key: "k", Fingerprint: []byte("fp"), Now: now, Retention: time.Hour, WaitBound: time.Second})
				return err
			}},
			{"Claim lost", answers{"claim": {err: dup}, "peek": {rows: [][]any{record(us + 10)}}}, []string{"claim", "peek"}, 2, func(d *mysqlDialect, q dialect.Queryer) error {
				res, err := d.Claim(ctx, q, table, dialect.ClaimArgs{Scope: "s", Key: "k", Fingerprint: []byte("fp"), Now: now, Retention: time.Hour})
				if err == nil && (res.Won || res.Record.Token != 3) {
					return errors.New("the record lost to is not reported")
				}
				return err
			}},
			{"Claim takes over", answers{"claim": {err: dup}, "peek": {rows: [][]any{record(us)}}, "takeover": {n: 1}}, []string{"claim", "peek", "takeover"}, 3, func(d *mysqlDialect, q dialect.Queryer) error {
				res, err := d.Claim(ctx, q, table, dialect.ClaimArgs{Scope: "s", Key: "k", Fingerprint: []byte("fp"), Retention: time.Hour})
				if err == nil && !res.Won {
					return errors.New("the expired record is not taken over")
				}
				return err
			}},
			{"ClaimBatch", answers{"peek_batch": {rows: [][]any{record(us), live("l")}}, "claim_batch": {n: 1}, "takeover": {n: 1}},
				[]string{"peek_batch", "claim_batch", "takeover"}, 3, func(d *mysqlDialect, q dialect.Queryer) error {
					res, err := d.ClaimBatch(ctx, q, table, dialect.BatchClaimArgs{Keys: []dialect.BatchKey{
						{Scope: "s", Key: "j", Fingerprint: []byte("fp")}, {Scope: "s", Key: "k", Fingerprint: []byte("fp")}, {Scope: "s", Key: "l", Fingerprint: []byte("fp")},
					}, Now: now, Retention: time.Hour, WaitBound: time.Second})
					if err == nil && (!res[0].Won || !res[1].Won || res[2].Won || res[2].Record.Key != "l") {
						return fmt.Errorf("new, expired and live key: %+v, want won, won (taken over) and lost", res)
					}
					return err
				}},
			{"CompleteBatch", answers{"complete_batch": {n: 2}}, []string{"complete_batch"}, 0, func(d *mysqlDialect, q dialect.Queryer) error {
				c := dialect.CompleteArgs{Scope: "s", Key: "k", Fingerprint: []byte("fp"), Status: 200, Header: []byte("h"), Body: []byte("b"), Now: now, Retention: time.Hour}
				c2 := c
				c2.Key = "l"
				return d.CompleteBatch(ctx, q, table, []dialect.CompleteArgs{c, c2})
			}},
			{"Complete", answers{"complete": {n: 1}}, []string{"complete"}, 0, func(d *mysqlDialect, q dialect.Queryer) error {
				return d.Complete(ctx, q, table, dialect.CompleteArgs{Scope: "s", Key: "k", Fingerprint: []byte("fp"), Status: 200, Header: []byte("h"), Body: []byte("b"), Now: now, Retention: time.Hour})
			}},
			{"Lookup", answers{"read": {rows: [][]any{record(us + 10)}}}, []string{"read"}, 0, func(d *mysqlDialect, q dialect.Queryer) error {
				_, found, err := d.Lookup(ctx, q, table, dialect.LookupArgs{Scope: "s", Key: "k", Now: now})
				if err == nil && !found {
					return errors.New("the record is not found")
				}
				return err
			}},
			{"Purge", answers{"purge": {rows: [][]any{{[]byte("s"), []byte("k"), int64(7)}}}, "purge delete": {n: 1}, "raise_floor": {n: 1}},
				[]string{"purge", "purge delete", "raise_floor"}, 0, func(d *mysqlDialect, q dialect.Queryer) error {
					_, err := d.Purge(ctx, q, table, dialect.PurgeArgs{Now: now, Limit: 10})
					return err
				}},
			{"InsertLease", answers{"lease_insert": {n: 1}, "floor_read": {rows: [][]any{{int64(2)}}}, "lease_stamp_token": {n: 1}},
				[]string{"lease_insert", "floor_read", "lease_stamp_token"}, 1, func(d *mysqlDialect, q dialect.Queryer) error {
					_, err := d.InsertLease(ctx, q, table, leaseArgs)
					return err
				}},
			{"TakeExpired", answers{"lease_take_expired": {n: 1}, "floor_read": {rows: [][]any{{int64(2)}}}, "lease_stamp_token": {n: 1}},
				[]string{"lease_take_expired", "floor_read", "lease_stamp_token"}, 1, func(d *mysqlDialect, q dialect.Queryer) error {
					_, err := d.TakeExpired(ctx, q, table, leaseArgs)
					return err
				}},
			{"ResumeLease", answers{"lease_resume": {n: 1}}, []string{"lease_resume"}, 1, func(d *mysqlDialect, q dialect.Queryer) error {
				_, err := d.ResumeLease(ctx, q, table, leaseArgs)
				return err
			}},
			{"ExtendLease", answers{"lease_extend": {n: 1}, "lease_until": {rows: [][]any{{&us}}}}, []string{"lease_extend", "lease_until"}, 0, func(d *mysqlDialect, q dialect.Queryer) error {
				_, err := d.ExtendLease(ctx, q, table, fenceArgs)
				return err
			}},
			{"RecordStep", answers{"lease_step": {n: 1}, "lease_until": {rows: [][]any{{&us}}}}, []string{"lease_step", "lease_until"}, 0, func(d *mysqlDialect, q dialect.Queryer) error {
				_, err := d.RecordStep(ctx, q, table, dialect.StepArgs{FenceArgs: fenceArgs, Step: "step", Data: []byte("data")})
				return err
			}},
			{"CompleteLease", answers{"lease_complete": {n: 0}, "lease_held": {rows: [][]any{{int64(1)}}}}, []string{"lease_complete", "lease_held"}, 0, func(d *mysqlDialect, q dialect.Queryer) error {
				return d.CompleteLease(ctx, q, table, dialect.CompleteLeaseArgs{FenceArgs: fenceArgs, Status: 200, Header: []byte("h"), Body: []byte("b"), Retention: time.Hour})
			}},
			{"ReleaseLease", answers{"lease_release": {n: 1}}, []string{"lease_release"}, 0, func(d *mysqlDialect, q dialect.Queryer) error {
				return d.ReleaseLease(ctx, q, table, fenceArgs)
			}},
			{"ExpiredLeases", answers{"lease_expired": {rows: [][]any{record(us + 10)}}}, []string{"lease_expired"}, 0, func(d *mysqlDialect, q dialect.Queryer) error {
				recs, err := d.ExpiredLeases(ctx, q, table, dialect.ExpiredLeasesArgs{Now: now, Limit: 10})
				if err == nil && len(recs) != 1 {
					return errors.New("the expired lease is not listed")
				}
				return err
			}},
		} {
			d := newDialect(0)
			d.perStatementWait, d.vitess = mode != "MySQL", mode == "vtgate"
			q := &scripted{t: t, catalog: catalog, answers: tc.answers}
			if err := tc.call(d, q); err != nil {
				t.Errorf("%s: %s: %v", mode, tc.name, err)
			}
			want := tc.want
			if tc.bound > 0 && mode == "MySQL" {
				// MySQL: the session's lock wait is set around the
				// statements that may wait, and put back.
				want = slices.Concat([]string{"lock_wait_set"}, tc.want[:tc.bound], []string{"lock_wait_restore"}, tc.want[tc.bound:])
			}
			if !slices.Equal(q.ran, want) {
				t.Errorf("%s: %s ran %v, want %v", mode, tc.name, q.ran, want)
			}
			for i, b := range q.bounded {
				if wantBound := mode != "MySQL" && i < tc.bound; b != wantBound {
					t.Errorf("%s: %s: statement %d (%s) bounded = %v, want %v", mode, tc.name, i, q.ran[i], b, wantBound)
				}
			}
			for _, n := range q.ran {
				ran[n] = true
			}
		}
		for name := range catalog {
			switch {
			case ran[name]:
			case strings.HasPrefix(name, "schema_"): // the migration runner's
			case mode != "MySQL" && strings.HasPrefix(name, "lock_wait_"): // bounded statement by statement instead
			default:
				t.Errorf("%s: statement %s is run by no call site", mode, name)
			}
		}
	}
}

// answer is what a scripted statement returns.
type answer struct {
	n    int64
	err  error
	rows [][]any
}

// scripted is a connection that knows the catalog: it names each statement
// it is sent, checks its placeholders against its arguments, and answers
// as scripted.
type scripted struct {
	t       *testing.T
	catalog map[string]dialect.Query
	answers map[string]answer
	ran     []string
	bounded []bool // of each statement run: it carried a wait bound

	patterns map[string]*regexp.Regexp
}

// vtgateBound is the query timeout directive waitBound puts after a
// statement's first word behind vtgate.
var vtgateBound = regexp.MustCompile(` /\*vt\+ QUERY_TIMEOUT_MS=[0-9]+ \*/`)

// literal is a value inline writes in place of a placeholder.
const literal = `(?:NULL|-?[0-9]+|X'[0-9A-F]*')`

// name identifies a statement sent, inlined or with its arguments, and
// records whether it carried a wait bound (SET STATEMENT, or vtgate's
// directive, which it takes out before it compares).
func (f *scripted) name(stmt string, args []any) string {
	f.t.Helper()
	directive := vtgateBound.FindStringIndex(stmt)
	if directive != nil {
		stmt = stmt[:directive[0]] + stmt[directive[1]:]
	}
	f.bounded = append(f.bounded, directive != nil || strings.HasPrefix(stmt, "SET STATEMENT "))
	if len(args) > 0 {
		text, ok := inline(stmt, args)
		if !ok {
			f.t.Fatalf("statement %q sent with %d arguments", stmt, len(args))
		}
		stmt = text
	}
	if strings.HasPrefix(stmt, "DELETE r FROM (SELECT ") {
		return "purge delete"
	}
	if f.patterns == nil {
		// Each statement inlined: its text with a literal for each ?,
		// under any SET STATEMENT.
		f.patterns = map[string]*regexp.Regexp{}
		for name, q := range f.catalog {
			parts := strings.Split(q.SQL, "?")
			for i := range parts {
				parts[i] = regexp.QuoteMeta(parts[i])
			}
			// A batch's statement has its derived table of keys in place
			// of the marker.
			pattern := strings.Replace(strings.Join(parts, literal), regexp.QuoteMeta(keysMarker), `\(SELECT .*\)`, 1)
			f.patterns[name] = regexp.MustCompile(`^(?:SET STATEMENT [^?]*? FOR )?` + pattern + `$`)
		}
	}
	var found []string
	for name, p := range f.patterns {
		if p.MatchString(stmt) {
			found = append(found, name)
		}
	}
	if len(found) != 1 {
		f.t.Fatalf("statement %q is %v of the catalog", stmt, found)
	}
	return found[0]
}

func (f *scripted) Exec(_ context.Context, stmt string, args ...any) (int64, error) {
	name := f.name(stmt, args)
	f.ran = append(f.ran, name)
	a := f.answers[name]
	return a.n, a.err
}

func (f *scripted) Query(_ context.Context, stmt string, args ...any) (dialect.Rows, error) {
	name := f.name(stmt, args)
	f.ran = append(f.ran, name)
	a := f.answers[name]
	if a.err != nil {
		return nil, a.err
	}
	return &scriptedRows{rows: a.rows, next: -1}, nil
}

// scriptedRows are rows whose values have the types Scan's destinations
// point to.
type scriptedRows struct {
	rows [][]any
	next int
}

func (r *scriptedRows) Next() bool   { r.next++; return r.next < len(r.rows) }
func (r *scriptedRows) Err() error   { return nil }
func (r *scriptedRows) Close() error { return nil }
func (r *scriptedRows) Scan(dest ...any) error {
	row := r.rows[r.next]
	if len(dest) != len(row) {
		return errors.New("scan of the wrong number of columns")
	}
	for i, v := range row {
		d := reflect.ValueOf(dest[i]).Elem()
		if v == nil {
			d.SetZero()
			continue
		}
		if !reflect.TypeOf(v).AssignableTo(d.Type()) {
			return errors.New("scan of column " + reflect.TypeOf(v).String() + " into " + d.Type().String())
		}
		d.Set(reflect.ValueOf(v))
	}
	return nil
}

func TestGaleraNode(t *testing.T) {
	for _, tc := range []struct {
		vars map[string]string
		want bool
	}{
		{map[string]string{}, false}, // MySQL: neither variable
		{map[string]string{"wsrep_on": "OFF", "wsrep_provider": "none"}, false},
		{map[string]string{"wsrep_on": "ON", "wsrep_provider": "none"}, false},
		{map[string]string{"wsrep_on": "ON", "wsrep_provider": "/usr/lib/galera/libgalera_smm.so"}, true},
	} {
		if got := galeraNode(tc.vars); got != tc.want {
			t.Errorf("galeraNode(%v) = %v, want %v", tc.vars, got, tc.want)
		}
	}
}

// On MySQL the session's lock wait is put back after every bounded call;
// when that fails the call fails, so a connection whose short wait stayed
// set is not taken for a good one.
func TestLockWaitRestoreFailureReported(t *testing.T) {
	table, _ := dialect.NewTable("t")
	catalog := dialect.MustLoadQueries(queries, "queries", table, dialect.Question)
	now := time.UnixMicro(1_700_000_000_000_000)
	ctx := context.Background()
	broken := errors.New("restore failed")
	for _, tc := range []struct {
		name    string
		answers map[string]answer
		call    func(d *mysqlDialect, q dialect.Queryer) error
	}{
		{"Claim", map[string]answer{"claim": {n: 1}}, func(d *mysqlDialect, q dialect.Queryer) error {
			_, err := d.Claim(ctx, q, table, dialect.ClaimArgs{Scope: "s", Key: "k", Fingerprint: []byte("fp"), Now: now, Retention: time.Hour, WaitBound: time.Second})
			return err
		}},
		{"ClaimBatch", map[string]answer{"peek_batch": {}, "claim_batch": {n: 1}}, func(d *mysqlDialect, q dialect.Queryer) error {
			_, err := d.ClaimBatch(ctx, q, table, dialect.BatchClaimArgs{Keys: []dialect.BatchKey{{Scope: "s", Key: "k", Fingerprint: []byte("fp")}},
				Now: now, Retention: time.Hour, WaitBound: time.Second})
			return err
		}},
		{"InsertLease", map[string]answer{"lease_insert": {n: 1}, "floor_read": {rows: [][]any{{int64(2)}}}, "lease_stamp_token": {n: 1}}, func(d *mysqlDialect, q dialect.Queryer) error {
			_, err := d.InsertLease(ctx, q, table, dialect.LeaseArgs{Scope: "s", Key: "k", Fingerprint: []byte("fp"), Now: now, Retention: time.Hour, Lease: time.Second, WaitBound: time.Second})
			return err
		}},
	} {
		answers := map[string]answer{"lock_wait_set": {}, "lock_wait_restore": {err: broken}}
		for k, v := range tc.answers {
			answers[k] = v
		}
		q := &scripted{t: t, catalog: catalog, answers: answers}
		if err := tc.call(newDialect(0), q); !errors.Is(err, broken) {
			t.Errorf("%s whose lock wait could not be put back: %v, want the restore's error", tc.name, err)
		}
	}
}
