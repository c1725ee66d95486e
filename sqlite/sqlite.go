// Package sqlite is idem's SQLite backend, on modernc.org/sqlite (pure Go, no
// cgo).
//
// SQLite has one writer at a time. Write transactions begin IMMEDIATE, so a
// claim takes the write lock before it reads anything: a deferred
// transaction that read first would fail on its first write once another
// writer committed, and busy_timeout could not help it. Writers therefore
// wait for each other on the whole database, up to the store's wait bound
// (PRAGMA busy_timeout); past it a claim reports InFlight. Open turns on WAL
// so readers (Lookup) never wait for the writer.
//
// The records are a WITHOUT ROWID table clustered on (scope, idem_key): one
// B-tree holds the rows and their key, so a claim writes two B-trees (with
// the expiry index), not three, and a commit writes fewer pages to the WAL.
// A table created by an earlier version keeps its rowid; every statement
// works on both. The dialect's statements are prepared once per connection
// and reused; modernc.org/sqlite would otherwise compile each one on every
// request.
//
// Times are stored as INTEGER Unix microseconds (UTC), so sorting and
// comparison are exact; the database's clock is unixepoch('subsec')
// (millisecond resolution). Keys and scopes are TEXT compared with the
// BINARY collation: byte for byte.
package sqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"modernc.org/sqlite"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/dialect"
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

// Driver runs idem on a *sql.DB opened with the modernc.org/sqlite driver.
type Driver struct {
	db      *sql.DB
	dialect *Dialect
	pool    poolQueryer
	stmts   *stmtCache
}

var _ dialect.Driver[*sql.Tx] = (*Driver)(nil)

// New returns a Driver on db, which should come from Open. It checks that db
// uses the modernc.org/sqlite driver, and refuses an in-memory database whose
// pooled connections would each see a different database.
func New(db *sql.DB) (*Driver, error) {
	if db == nil {
		return nil, fmt.Errorf("sqlite: %w: nil *sql.DB", idem.ErrInvalidConfig)
	}
	if _, ok := db.Driver().(*sqlite.Driver); !ok {
		return nil, fmt.Errorf("sqlite: %w: *sql.DB uses driver %T, not modernc.org/sqlite", idem.ErrInvalidConfig, db.Driver())
	}
	if err := checkSharedMemory(db); err != nil {
		return nil, err
	}
	pool, err := idem.SQL(db)
	if err != nil {
		return nil, err
	}
	stmts := newStmtCache(db)
	return &Driver{db: db, dialect: NewDialect(), pool: poolQueryer{Tx: pool, cache: stmts}, stmts: stmts}, nil
}

// ErrPrivateMemory is returned by New for a ":memory:" database opened so
// that each pooled connection has its own database. Use Open(":memory:"), or
// db.SetMaxOpenConns(1).
var ErrPrivateMemory = errors.New("sqlite: each pooled connection would see its own in-memory database")

// checkSharedMemory detects a plain ":memory:" pool: two connections that do
// not see each other's write lock are two databases.
func checkSharedMemory(db *sql.DB) error {
	if db.Stats().MaxOpenConnections == 1 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
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
	defer a.ExecContext(ctx, "ROLLBACK")
	if _, err := b.ExecContext(ctx, "PRAGMA busy_timeout = 0"); err != nil {
		return err
	}
	if _, err := b.ExecContext(ctx, "BEGIN IMMEDIATE"); err == nil {
		b.ExecContext(ctx, "ROLLBACK")
		return ErrPrivateMemory
	}
	return nil
}

// Dialect returns the SQLite dialect.
func (d *Driver) Dialect() dialect.Dialect { return d.dialect }

// Pool returns the database for statements outside a caller's transaction.
func (d *Driver) Pool() dialect.Queryer { return d.pool }

// Wrap adapts a transaction the caller began on this database.
func (d *Driver) Wrap(tx *sql.Tx) (dialect.Queryer, error) {
	if tx == nil {
		return nil, fmt.Errorf("%w: nil *sql.Tx", dialect.ErrBadTx)
	}
	q, err := idem.SQL(tx)
	if err != nil {
		return nil, err
	}
	return txQueryer{Tx: q, tx: tx, cache: d.stmts}, nil
}

// Begin starts a write transaction on a dedicated connection whose
// busy_timeout is the wait bound, so BEGIN IMMEDIATE waits at most that long
// for another writer. The connection's own busy_timeout is put back when the
// transaction ends, so other users of the pool keep theirs; when it already
// is the wait bound, Begin sets nothing.
func (d *Driver) Begin(ctx context.Context, opts dialect.BeginOptions) (dialect.Txn[*sql.Tx], error) {
	// Statements first seen in earlier transactions are prepared here,
	// while this goroutine holds no connection.
	d.stmts.prepareWanted(ctx)
	conn, err := d.db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	var previous int64
	if err := conn.QueryRowContext(ctx, "PRAGMA busy_timeout").Scan(&previous); err != nil {
		conn.Close()
		return nil, err
	}
	wait := opts.WaitBound
	if wait <= 0 {
		wait = DefaultBusyTimeout
	}
	want := max(wait.Milliseconds(), 1)
	release := func() { conn.Close() }
	if want != previous {
		// Set the wait bound for this transaction, and put the
		// connection's own busy_timeout back afterwards. When they are
		// equal (Open's default and the default WaitBound), neither
		// statement is needed.
		if _, err := conn.ExecContext(ctx, busyTimeout(want)); err != nil {
			conn.Close()
			return nil, err
		}
		release = func() {
			// Bounded, and on a context of its own: the caller's may have ended.
			rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if _, err := conn.ExecContext(rctx, busyTimeout(previous)); err != nil {
				// The connection would keep the wait bound: drop it instead.
				_ = conn.Raw(func(any) error { return driver.ErrBadConn })
			}
			conn.Close()
		}
	}
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		release()
		return nil, err
	}
	q, err := idem.SQL(tx)
	if err != nil {
		tx.Rollback()
		release()
		return nil, err
	}
	return txn{SQLTxn: idem.NewSQLTxn(tx, release), q: txQueryer{Tx: q, tx: tx, cache: d.stmts}}, nil
}

func busyTimeout(ms int64) string { return "PRAGMA busy_timeout = " + strconv.FormatInt(ms, 10) }

// DB returns the database the driver runs on.
func (d *Driver) DB() *sql.DB { return d.db }
