package containers_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"strings"
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
