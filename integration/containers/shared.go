package containers

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"testing"

	"github.com/testcontainers/testcontainers-go"
)

// sharedDBs holds the pools SharedDB opened, one per DSN.
var sharedDBs sync.Map // dsn -> *sql.DB

// SharedDB returns the go-sql-driver/mysql pool of dsn that every test of
// the binary shares, of 40 connections, opening it on the first call: tests
// that each opened their own would exhaust the server's connections. It is
// never closed; the binary's end closes it. Safe for concurrent use.
func SharedDB(tb testing.TB, dsn string) *sql.DB {
	tb.Helper()
	if db, ok := sharedDBs.Load(dsn); ok {
		return db.(*sql.DB)
	}
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		tb.Fatal(err)
	}
	db.SetMaxOpenConns(40)
	db.SetMaxIdleConns(40)
	actual, loaded := sharedDBs.LoadOrStore(dsn, db)
	if loaded {
		db.Close()
	}
	return actual.(*sql.DB)
}

// endpoint returns the host and the mapped host port of ctr's port (as
// "4222/tcp").
func endpoint(ctx context.Context, ctr testcontainers.Container, port string) (host, mapped string, err error) {
	host, err = ctr.Host(ctx)
	if err != nil {
		return "", "", fmt.Errorf("host: %w", err)
	}
	p, err := ctr.MappedPort(ctx, port)
	if err != nil {
		return "", "", fmt.Errorf("mapped port: %w", err)
	}
	return host, p.Port(), nil
}
