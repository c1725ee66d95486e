// Package exampletest gives the example services' tests fresh databases on
// the test servers (integration/containers) and a log writer.
package exampletest

import (
	"database/sql"
	"fmt"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	mysqldriver "github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" database/sql driver

	"github.com/idemkit/idem/integration/containers"
)

var databaseSeq atomic.Int64

// FreshPostgres creates an empty database on the test server and returns
// its postgres:// URL.
func FreshPostgres(t *testing.T, prefix string) string {
	t.Helper()
	admin := containers.Postgres(t)
	name := fmt.Sprintf("%s_%d_%d", prefix, os.Getpid(), databaseSeq.Add(1))
	db, err := sql.Open("pgx", admin)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.ExecContext(t.Context(), "CREATE DATABASE "+name); err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(admin)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + name
	return u.String()
}

// FreshMySQL creates an empty database on the test server and returns its
// mysql:// URL.
func FreshMySQL(t *testing.T, prefix string) string {
	t.Helper()
	cfg, err := mysqldriver.ParseDSN(containers.MySQL(t))
	if err != nil {
		t.Fatal(err)
	}
	name := fmt.Sprintf("%s_%d_%d", prefix, os.Getpid(), databaseSeq.Add(1))
	connector, err := mysqldriver.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(connector)
	defer db.Close()
	if _, err := db.ExecContext(t.Context(), "CREATE DATABASE "+name); err != nil {
		t.Fatal(err)
	}
	u := url.URL{Scheme: "mysql", User: url.UserPassword(cfg.User, cfg.Passwd), Host: cfg.Addr, Path: "/" + name}
	return u.String()
}

// Log sends a logger's lines to the test's log.
type Log struct{ T testing.TB }

func (l Log) Write(p []byte) (int, error) {
	l.T.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}
