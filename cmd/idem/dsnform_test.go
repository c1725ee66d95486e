package main

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestClassifyDSN: every form -dsn takes is recognised as what it is, and
// anything that is none of them, or could be meant as another, is a usage
// error: a key=value string is never a SQLite path.
func TestClassifyDSN(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		dsn  string
		want dsnForm // 0: refused
	}{
		// SQLite: plain paths.
		{"orders.db", sqliteForm},
		{"orders", sqliteForm},
		{"./orders.db", sqliteForm},
		{"../data/orders.db", sqliteForm},
		{"/var/lib/app/idem.db", sqliteForm},
		{"data dir/orders.db", sqliteForm},
		{"db/orders", sqliteForm},
		{"/orders", sqliteForm}, // go-sql-driver would read a database name, but there is no @
		{"~/orders.db", sqliteForm},
		{"orders-2024_01.v2.db", sqliteForm},
		// SQLite: explicit.
		{"sqlite:orders.db", sqliteForm},
		{"sqlite:/var/lib/app/o=d@x:y.db", sqliteForm},
		{"sqlite:host=db user=app", sqliteForm},
		{"file:orders.db?mode=ro", sqliteForm},
		{"file:/var/lib/app/idem.db", sqliteForm},
		{"file:///var/lib/app/idem.db", sqliteForm},
		{":memory:", sqliteForm},

		// PostgreSQL.
		{"postgres://app:pw@db:5432/orders?sslmode=require", postgresURLForm},
		{"postgresql://app@db/orders", postgresURLForm},
		{"postgres://app:p@ss@db/orders", postgresURLForm}, // malformed: openTarget says so
		{"host=db user=app dbname=orders", postgresSettingsForm},
		{"dbname=orders", postgresSettingsForm},
		{"  host = db   port=5432 ", postgresSettingsForm},
		{"host=db password='p w \\' x' sslmode=require", postgresSettingsForm},
		{"host=/var/run/postgresql dbname=orders options='-c search_path=app'", postgresSettingsForm},
		{"password=", postgresSettingsForm},

		// MySQL.
		{"mysql://app:pw@db:3306/orders?tls=true", mysqlURLForm},
		{"app:pw@tcp(db:3306)/orders?parseTime=true", mysqlDriverForm},
		{"app:p@ss/w@tcp(db)/orders", mysqlDriverForm},
		{"app@unix(/run/mysqld/mysqld.sock)/orders", mysqlDriverForm},
		{"app:pw@/orders", mysqlDriverForm},
		{"app@tcp/orders", mysqlDriverForm},
		{"app:pw@tcp(db:3306/orders", mysqlDriverForm}, // unclosed: the driver says so

		// Refused.
		{"", 0},
		{"host=db user=app dbname=orders frob=1", 0}, // not a keyword pgx takes
		{"search_path=app", 0},
		{"foo=bar", 0},
		{"orders=1.db", 0},
		{"host=db user", 0},           // no =
		{"host=db password='pw", 0},   // unterminated
		{"host=db password='pw'x", 0}, // text after the quote
		{"host=db pass word=x", 0},    // a space in a keyword
		{"./a=b.db", 0},               // sqlite:./a=b.db
		{"/data/x.db dbname=orders", 0},
		{"app@db/orders", 0},            // user@host/db: no such form
		{"/home/me/@work/orders.db", 0}, // sqlite:/home/me/@work/orders.db
		{"backups/app@tcp/orders.db", 0},
		{"tcp(db:3306)/orders", 0},
		{"db:5432/orders", 0},
		{"localhost:5432", 0},
		{"user:pw@db", 0},
		{"orders.db?mode=ro", 0},
		{"C:orders.db", 0},
		{"sqlite:", 0},
		{"sqlite:///var/lib/app/idem.db", 0}, // sqlite:/// is absolute to some tools, relative to others
		{"redis://db/0", 0},
		{"postgres:db/orders", 0},
		{"mysql:app@db", 0},
	} {
		form, err := classifyDSN(tc.dsn)
		var usage usageError
		switch {
		case tc.want == 0 && (err == nil || !errors.As(err, &usage)):
			t.Errorf("classifyDSN(%q) = %v, %v; want a usage error", tc.dsn, form, err)
		case tc.want != 0 && (err != nil || form != tc.want):
			t.Errorf("classifyDSN(%q) = %v, %v; want %v", tc.dsn, form, err, tc.want)
		}
	}
}

// TestParseSettings: libpq's key=value syntax, and formatSettings writes
// settings that parse back to the same.
func TestParseSettings(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want []setting
	}{
		{"host=db", []setting{{"host", "db"}}},
		{" host = db\tport=5432\n", []setting{{"host", "db"}, {"port", "5432"}}},
		{`password='p w \' \\ x' user=app`, []setting{{"password", `p w ' \ x`}, {"user", "app"}}},
		{`password=a\ b\\c user=app`, []setting{{"password", `a b\c`}, {"user", "app"}}},
		{`password='' user=app`, []setting{{"password", ""}, {"user", "app"}}},
		{`password= user=app`, []setting{{"password", "user=app"}}}, // as libpq: the value is the next word
		{`password=p=w`, []setting{{"password", "p=w"}}},
	} {
		got, err := parseSettings(tc.in)
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("parseSettings(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
			continue
		}
		again, err := parseSettings(formatSettings(got))
		if err != nil || !slices.Equal(again, got) {
			t.Errorf("parseSettings(formatSettings(%q)) = %q, %v", got, again, err)
		}
	}
	for _, in := range []string{"", "   ", "host", "host=db x", "=db", "1host=db", "host=db password='x", `password='x\'`, "password='x'y"} {
		if got, err := parseSettings(in); err == nil {
			t.Errorf("parseSettings(%q) = %q, want an error", in, got)
		}
	}
}

// TestDSNFormsCreateNothing: idem migrate with a -dsn of no form it takes
// exits 2, lists the forms and creates no file; ordinary SQLite paths
// still work, and a key=value string goes to PostgreSQL, never to a
// SQLite file of that name.
func TestDSNFormsCreateNothing(t *testing.T) {
	t.Chdir(t.TempDir())
	for _, dsn := range []string{"foo=bar", "host=db user=app dbname=orders frob=1", "app@db/orders", "db:5432/orders",
		"./a=b.db", "orders.db?mode=ro", "sqlite:///orders.db", "/data/x.db dbname=orders"} {
		code, out, errText := cli(t, false, "migrate", "-dsn", dsn)
		if code != exitUsage || out != "" || !strings.Contains(errText, "-dsn") {
			t.Errorf("migrate -dsn %q: exit %d, stdout %q, stderr %q; want exit %d and an error", dsn, code, out, errText, exitUsage)
		}
	}
	code, _, errText := cli(t, false, "migrate", "-dsn", "app@db/orders")
	for _, form := range []string{"orders.db", "sqlite:PATH", "postgres://", "key=value", "mysql://", "@tcp("} {
		if code != exitUsage || !strings.Contains(errText, form) {
			t.Errorf("the refusal does not list %q: %s", form, errText)
		}
	}
	// The case: PostgreSQL (here unreachable), not a file.
	if code, out, errText := cli(t, false, "migrate", "-dsn", "host=127.0.0.1 port=1 user=app dbname=orders connect_timeout=5"); code != exitFailure ||
		strings.Contains(out, "schema version") || !strings.Contains(errText, "PostgreSQL") {
		t.Errorf("migrate -dsn key=value: exit %d, stdout %q, stderr %q; want exit %d connecting to PostgreSQL", code, out, errText, exitFailure)
	}
	if files, err := os.ReadDir("."); err != nil || len(files) != 0 {
		t.Fatalf("files after refused DSNs: %v, %v", files, err)
	}

	abs, err := filepath.Abs("abs.db")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir("data dir", 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ dsn, file string }{
		{"orders.db", "orders.db"},
		{"./dot.db", "dot.db"},
		{abs, "abs.db"},
		{"data dir/spaced.db", "data dir/spaced.db"},
		{"sqlite:odd=name@x.db", "odd=name@x.db"},
		{"file:uri.db", "uri.db"},
	} {
		if code, out, errText := cli(t, false, "migrate", "-dsn", tc.dsn); code != exitOK || !strings.Contains(out, "schema version 0 -> ") {
			t.Errorf("migrate -dsn %q: exit %d: %s %s", tc.dsn, code, out, errText)
		}
		if _, err := os.Stat(tc.file); err != nil {
			t.Errorf("migrate -dsn %q: %v", tc.dsn, err)
		}
	}
}
