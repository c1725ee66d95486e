package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync/atomic"
	"time"
)

// DefaultBusyTimeout is the busy_timeout Open sets for statements outside
// idem's transactions (each idem transaction sets its own wait bound).
const DefaultBusyTimeout = 5 * time.Second

// memoryDatabases numbers the private in-memory databases Open creates, so
// two Opens of ":memory:" never share one.
var memoryDatabases atomic.Int64

// Open opens a SQLite database for idem: path is a file name, a "file:" URI
// or ":memory:". It adds what the backend relies on unless the DSN already
// sets it: BEGIN IMMEDIATE for transactions (_txlock=immediate), WAL
// journaling (files only), busy_timeout and foreign keys. It refuses a DSN
// asking for deferred or exclusive transactions.
//
// ":memory:" would give every pooled connection its own empty database;
// Open instead names one in-memory database (the memdb VFS) that all
// connections of the returned pool share. SQLite frees it when its last
// connection closes; database/sql keeps idle connections open, so it lives
// as long as the pool unless every connection is closed.
func Open(path string) (*sql.DB, error) {
	dsn, err := buildDSN(path)
	if err != nil {
		return nil, err
	}
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("sqlite: open %q: %w", path, err)
	}
	if err := db.Ping(); err != nil {
		db.Close()
		return nil, fmt.Errorf("sqlite: open %q: %w", path, err)
	}
	return db, nil
}

func buildDSN(path string) (string, error) {
	if path == "" {
		return "", errors.New("sqlite: empty path")
	}
	memory := false
	base, rawQuery, _ := strings.Cut(path, "?")
	switch base {
	case ":memory:", "file::memory:":
		base = fmt.Sprintf("file:/idem-memory-%d", memoryDatabases.Add(1))
		memory = true
	}
	q, err := url.ParseQuery(rawQuery)
	if err != nil {
		return "", fmt.Errorf("sqlite: DSN query of %q: %w", path, err)
	}
	if memory || q.Get("mode") == "memory" {
		memory = true
		q.Del("mode")
		q.Set("vfs", "memdb")
	}
	if v := q.Get("_txlock"); v != "" && !strings.EqualFold(v, "immediate") {
		return "", fmt.Errorf("sqlite: DSN sets _txlock=%s; idem needs immediate", v)
	}
	q.Set("_txlock", "immediate")
	pragmas := strings.ToLower(strings.Join(q["_pragma"], ","))
	if !strings.Contains(pragmas, "busy_timeout") && q.Get("_busy_timeout") == "" && q.Get("_timeout") == "" {
		q.Add("_pragma", fmt.Sprintf("busy_timeout(%d)", DefaultBusyTimeout.Milliseconds()))
	}
	if !memory && !strings.Contains(pragmas, "journal_mode") && q.Get("_journal_mode") == "" && q.Get("_journal") == "" {
		q.Add("_pragma", "journal_mode(WAL)")
	}
	if !strings.Contains(pragmas, "foreign_keys") && q.Get("_foreign_keys") == "" && q.Get("_fk") == "" {
		q.Add("_pragma", "foreign_keys(1)")
	}
	if memory && !strings.HasPrefix(base, "file:") {
		base = "file:" + base
	}
	return base + "?" + q.Encode(), nil
}

// ErrPrivateMemory is returned by New for a ":memory:" database opened so
// that each pooled connection has its own database. Use Open(":memory:"), or
// db.SetMaxOpenConns(1).
var ErrPrivateMemory = errors.New("sqlite: each pooled connection would see its own in-memory database")

// checkSharedMemory detects a plain ":memory:" pool: two connections that do
// not see each other's write lock are two databases.
func checkSharedMemory(ctx context.Context, db *sql.DB) error {
	if db.Stats().MaxOpenConnections == 1 {
		return nil
	}
	var seq int
	var name, file string
	if err := db.QueryRowContext(ctx, "PRAGMA database_list").Scan(&seq, &name, &file); err != nil {
		return fmt.Errorf("sqlite: inspect database: %w", err)
	}
	if file != "" {
		return nil
	}
	a, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	defer a.Close()
	b, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	defer b.Close()
	if _, err := a.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		return fmt.Errorf("sqlite: probe in-memory database: %w", err)
	}
	defer func() { _, _ = a.ExecContext(ctx, "ROLLBACK") }()
	if _, err := b.ExecContext(ctx, "PRAGMA busy_timeout = 0"); err != nil {
		return err
	}
	if _, err := b.ExecContext(ctx, "BEGIN IMMEDIATE"); err == nil {
		_, _ = b.ExecContext(ctx, "ROLLBACK")
		return ErrPrivateMemory
	}
	return nil
}
