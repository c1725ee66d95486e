package containers_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/idemkit/idem/integration/containers"
)

func TestMain(m *testing.M) { containers.Main(m) }

// roundTrip pings db, creates a table, inserts a row and reads it back.
func roundTrip(t *testing.T, db *sql.DB, table, placeholder string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	if err := db.PingContext(ctx); err != nil {
		t.Fatalf("ping: %v", err)
	}
	if _, err := db.ExecContext(ctx, "DROP TABLE IF EXISTS "+table); err != nil {
		t.Fatalf("drop table: %v", err)
	}
	if _, err := db.ExecContext(ctx, "CREATE TABLE "+table+" (k VARCHAR(64) PRIMARY KEY, v INTEGER NOT NULL)"); err != nil {
		t.Fatalf("create table: %v", err)
	}
	t.Cleanup(func() { _, _ = db.Exec("DROP TABLE IF EXISTS " + table) })

	insert := fmt.Sprintf("INSERT INTO %s (k, v) VALUES (%s, %s)", table, placeholder, strings.Replace(placeholder, "1", "2", 1))
	if _, err := db.ExecContext(ctx, insert, "héllo-✓", 42); err != nil {
		t.Fatalf("insert: %v", err)
	}
	var k string
	var v int
	if err := db.QueryRowContext(ctx, "SELECT k, v FROM "+table).Scan(&k, &v); err != nil {
		t.Fatalf("select: %v", err)
	}
	if k != "héllo-✓" || v != 42 {
		t.Fatalf("read back (%q, %d), want (%q, 42)", k, v, "héllo-✓")
	}
}

func TestContainersPostgres(t *testing.T) {
	t.Parallel()
	dsn := containers.Postgres(t)
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	roundTrip(t, db, "containers_roundtrip", "$1")

	var enc string
	if err := db.QueryRow("SHOW server_encoding").Scan(&enc); err != nil {
		t.Fatal(err)
	}
	if enc != "UTF8" {
		t.Errorf("server_encoding %q, want UTF8", enc)
	}
	var maxConns int
	if err := db.QueryRow("SELECT current_setting('max_connections')::int").Scan(&maxConns); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: max_connections=%d", redact(dsn), maxConns)
}

func TestContainersMySQL(t *testing.T) {
	t.Parallel()
	dsn := containers.MySQL(t)
	if os.Getenv(containers.EnvMySQLDSN) == "" && strings.Contains(dsn, "?") {
		t.Errorf("DSN %q has parameters; MySQL should return none", redact(dsn))
	}
	db, err := sql.Open("mysql", dsn+"?parseTime=true&charset=utf8mb4")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	roundTrip(t, db, "containers_roundtrip", "?")

	// The tests may create databases of their own.
	if _, err := db.Exec("CREATE DATABASE IF NOT EXISTS idem_containers_extra"); err != nil {
		t.Errorf("create database: %v", err)
	} else {
		_, _ = db.Exec("DROP DATABASE idem_containers_extra")
	}
	var version string
	if err := db.QueryRow("SELECT VERSION()").Scan(&version); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s: version %s", redact(dsn), version)
}

// TestContainersShared checks that concurrent callers share one server.
func TestContainersShared(t *testing.T) {
	t.Parallel()
	for _, get := range []func(testing.TB) string{containers.Postgres, containers.MySQL} {
		var wg sync.WaitGroup
		recs := make([]*recorder, 4)
		dsns := make([]string, len(recs))
		for i := range recs {
			recs[i] = &recorder{TB: t}
			wg.Go(func() {
				// Only the test's goroutine may call t.Skip or t.Fatal.
				defer func() {
					if r := recover(); r != nil && r != errStop {
						panic(r)
					}
				}()
				dsns[i] = get(recs[i])
			})
		}
		wg.Wait()
		for i, r := range recs {
			switch {
			case r.fatal != "":
				t.Fatalf("caller %d: %s", i, r.fatal)
			case r.skip != "":
				t.Skip(r.skip)
			case dsns[i] != dsns[0]:
				t.Errorf("caller %d got %q, caller 0 %q", i, redact(dsns[i]), redact(dsns[0]))
			}
		}
	}
}

var errStop = errors.New("stopped")

// recorder is a testing.TB for goroutines: it records Fatalf and Skipf and
// stops the goroutine instead of the test.
type recorder struct {
	testing.TB
	fatal, skip string
}

func (r *recorder) Helper() {}

func (r *recorder) Fatalf(format string, args ...any) {
	r.fatal = fmt.Sprintf(format, args...)
	panic(errStop)
}

func (r *recorder) Skipf(format string, args ...any) {
	r.skip = fmt.Sprintf(format, args...)
	panic(errStop)
}

// redact hides the password of a DSN in test logs.
func redact(dsn string) string {
	at := strings.LastIndex(dsn, "@")
	if at < 0 {
		return dsn
	}
	head := dsn[:at]
	if colon := strings.LastIndex(head, ":"); colon >= 0 && !strings.HasSuffix(head[:colon+1], "//") {
		return head[:colon+1] + "xxx" + dsn[at:]
	}
	return dsn
}
