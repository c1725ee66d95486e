package dialect_test

import (
	"database/sql"
	"errors"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/idemkit/idem/dialect"
)

func TestCompile(t *testing.T) {
	for _, c := range []struct {
		name, text string
		p          dialect.Placeholder
		want       string
		params     []string
	}{
		{"dollar reuses a number", "SELECT @a, @b, @a", dialect.Dollar, "SELECT $1, $2, $1", []string{"a", "b"}},
		{"question repeats", "SELECT @a, @b, @a", dialect.Question, "SELECT ?, ?, ?", []string{"a", "b"}},
		{"casts", "SELECT @now::timestamptz", dialect.Dollar, "SELECT $1::timestamptz", []string{"now"}},
		{"system variable", "SET x = @@SESSION.innodb_lock_wait_timeout, y = @v", dialect.Question, "SET x = @@SESSION.innodb_lock_wait_timeout, y = ?", []string{"v"}},
		{"quoted user variable", "SET @`saved` = @v", dialect.Question, "SET @`saved` = ?", []string{"v"}},
		{"operators", "SELECT a @> b, c <@ @d", dialect.Dollar, "SELECT a @> b, c <@ $1", []string{"d"}},
		{"strings and comments", "SELECT '@a', \"@b\" -- @c\n/* @d */ FROM t WHERE x = @e", dialect.Question,
			"SELECT '@a', \"@b\" -- @c\n/* @d */ FROM t WHERE x = ?", []string{"e"}},
		{"no parameters", "SELECT 1", dialect.Dollar, "SELECT 1", nil},
		{"an @ after a name byte", "GRANT x TO root@localhost, @who", dialect.Question, "GRANT x TO root@localhost, ?", []string{"who"}},
		{"doubled quotes", "SELECT 'it''s @a', @b", dialect.Question, "SELECT 'it''s @a', ?", []string{"b"}},
		{"an @ after a closing single quote", "GRANT x TO 'app'@localhost, @who", dialect.Question, "GRANT x TO 'app'@localhost, ?", []string{"who"}},
		{"an @ after a closing double quote", `SET "u"@h = @v`, dialect.Dollar, `SET "u"@h = $1`, []string{"v"}},
		{"an @ after a closing backquote", "GRANT x TO `app`@host_1", dialect.Question, "GRANT x TO `app`@host_1", nil},
		{"an @ after a quoted host", "GRANT x TO 'app'@'%', @who", dialect.Question, "GRANT x TO 'app'@'%', ?", []string{"who"}},
		{"a comment after a comment", "SELECT /* a */ @x /* b */", dialect.Dollar, "SELECT /* a */ $1 /* b */", []string{"x"}},
		{"a comment's star", "SELECT /* 2 * 3 / 4 */ @x", dialect.Dollar, "SELECT /* 2 * 3 / 4 */ $1", []string{"x"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			q, err := dialect.Compile(c.name, c.text, c.p)
			if err != nil {
				t.Fatal(err)
			}
			if q.SQL != c.want || !reflect.DeepEqual(q.Params(), c.params) {
				t.Fatalf("Compile = %q %v, want %q %v", q.SQL, q.Params(), c.want, c.params)
			}
		})
	}
	for _, bad := range []string{
		"SELECT 'open", "SELECT /* open", "SELECT $1, @a", "SELECT ?, @a", "SELECT $$ @a $$",
		// PostgreSQL nests comments: @a is inside the outer one there,
		// and a parameter to MySQL and SQLite. Refused either way.
		"SELECT /* outer /* inner */ @a */ 1",
		"SELECT /* outer /* inner */ */ @a",
	} {
		for _, p := range []dialect.Placeholder{dialect.Dollar, dialect.Question} {
			if q, err := dialect.Compile("bad", bad, p); !errors.Is(err, dialect.ErrInvalidConfig) {
				t.Errorf("Compile(%q, %v) = %q %v, %v; want ErrInvalidConfig", bad, p, q.SQL, q.Params(), err)
			}
		}
	}
}

// FuzzCompile checks that Compile never panics, and that what it compiles
// is consistent: every name it reports has a placeholder, Args accepts
// exactly those names, and the text outside the placeholders is kept.
func FuzzCompile(f *testing.F) {
	for _, seed := range []string{
		"SELECT @a, @b, @a", "SELECT '@a' -- @b\n/* @c */ @d", "GRANT x TO 'app'@localhost, @who",
		"SELECT /* outer /* inner */ @a */ 1", "SET @@x = @y, @`z` = 1", "SELECT a @> b, c <@ @d",
	} {
		f.Add(seed, true)
		f.Add(seed, false)
	}
	f.Fuzz(func(t *testing.T, text string, dollar bool) {
		p := dialect.Question
		if dollar {
			p = dialect.Dollar
		}
		q, err := dialect.Compile("fuzz", text, p)
		if err != nil {
			if !errors.Is(err, dialect.ErrInvalidConfig) {
				t.Fatalf("Compile(%q) = %v, want ErrInvalidConfig", text, err)
			}
			return
		}
		named := make([]sql.NamedArg, 0, len(q.Params()))
		for _, n := range q.Params() {
			if !strings.Contains(text, "@"+n) {
				t.Fatalf("Compile(%q) reports parameter %q the text does not hold", text, n)
			}
			named = append(named, sql.Named(n, n))
		}
		args, err := q.Args(named...)
		if err != nil {
			t.Fatalf("Compile(%q) = %q %v: Args of its own names: %v", text, q.SQL, q.Params(), err)
		}
		if p == dialect.Question {
			// Quotes and comments are copied as they are (a ? outside
			// them is refused), so each further ? is a placeholder.
			if n := strings.Count(q.SQL, "?") - strings.Count(text, "?"); n != len(args) {
				t.Fatalf("Compile(%q) = %q: %d placeholders, %d arguments", text, q.SQL, n, len(args))
			}
			return
		}
		if strings.Contains(text, "$") {
			return
		}
		// Putting the names back where the placeholders are gives the text
		// back: nothing but the parameters changed.
		back := q.SQL
		for i := len(q.Params()); i >= 1; i-- { // $12 before $1
			back = strings.ReplaceAll(back, "$"+strconv.Itoa(i), "@"+q.Params()[i-1])
		}
		if back != text {
			t.Fatalf("Compile(%q) = %q: with the names put back it reads %q", text, q.SQL, back)
		}
	})
}

func TestQueryArgs(t *testing.T) {
	q, err := dialect.Compile("q", "SELECT @a, @b, @a", dialect.Question)
	if err != nil {
		t.Fatal(err)
	}
	args, err := q.Args(sql.Named("b", 2), sql.Named("a", 1))
	if err != nil || !reflect.DeepEqual(args, []any{1, 2, 1}) {
		t.Fatalf("Args = %v, %v; want [1 2 1]", args, err)
	}
	for name, named := range map[string][]sql.NamedArg{
		"missing":  {sql.Named("a", 1)},
		"unknown":  {sql.Named("a", 1), sql.Named("c", 3)},
		"extra":    {sql.Named("a", 1), sql.Named("b", 2), sql.Named("c", 3)},
		"repeated": {sql.Named("a", 1), sql.Named("a", 2)},
	} {
		if _, err := q.Args(named...); !errors.Is(err, dialect.ErrInvalidConfig) {
			t.Errorf("%s: Args = %v, want ErrInvalidConfig", name, err)
		}
	}
}

func TestLoadQueries(t *testing.T) {
	fsys := fstest.MapFS{
		"q/_parts.sql": {Data: []byte(`{{define "cols"}}scope, idem_key{{end}}`)},
		"q/read.sql":   {Data: []byte("SELECT {{template \"cols\" .}} FROM \"{{.Name}}\"\nWHERE scope = @scope AND idem_key = @key\n")},
	}
	tbl, err := dialect.NewTable("keys")
	if err != nil {
		t.Fatal(err)
	}
	qs, err := dialect.LoadQueries(fsys, "q", tbl, dialect.Dollar)
	if err != nil {
		t.Fatal(err)
	}
	if len(qs) != 1 || qs["read"].SQL != "SELECT scope, idem_key FROM \"keys\"\nWHERE scope = $1 AND idem_key = $2" {
		t.Fatalf("LoadQueries = %#v", qs)
	}
	if _, err := dialect.LoadQueries(fsys, "none", tbl, dialect.Dollar); !errors.Is(err, dialect.ErrInvalidConfig) {
		t.Fatalf("an empty catalog: %v, want ErrInvalidConfig", err)
	}
}

func TestCatalog(t *testing.T) {
	q, err := dialect.Compile("a", "SELECT 1", dialect.Dollar)
	if err != nil {
		t.Fatal(err)
	}
	mustPanic := func(what string, f func()) {
		t.Helper()
		defer func() {
			if recover() == nil {
				t.Errorf("%s did not panic", what)
			}
		}()
		f()
	}
	c := dialect.NewCatalog("test", map[string]dialect.Query{"a": q, "b": q})
	if got := c.Take("a"); got.SQL != "SELECT 1" {
		t.Fatalf("Take = %q", got.SQL)
	}
	mustPanic("Take of a missing statement", func() { c.Take("missing") })
	mustPanic("Done with b never taken", c.Done)
	c.Take("b")
	c.Done()
}

func TestMustCompilePart(t *testing.T) {
	fsys := fstest.MapFS{
		"q/_parts.sql": {Data: []byte(`{{define "now"}}COALESCE(@now, now()){{end}}`)},
		"q/read.sql":   {Data: []byte(`SELECT 1`)},
	}
	if got := dialect.MustCompilePart(fsys, "q", `{{template "now"}} - @age`, dialect.Question); got != "COALESCE(?, now()) - ?" {
		t.Fatalf("MustCompilePart = %q", got)
	}
	defer func() {
		if recover() == nil {
			t.Fatal("a part the catalog lacks did not panic")
		}
	}()
	dialect.MustCompilePart(fsys, "q", `{{template "missing"}}`, dialect.Question)
}
