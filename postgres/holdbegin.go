package postgres

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/idemkit/idem/dialect"
)

// HoldBegin wraps a connector of pgx's database/sql driver
// (stdlib.GetConnector or stdlib.GetPoolConnector) so that its connections
// hold BEGIN back until the transaction's first statement, for
// sql.OpenDB:
//
//	db := sql.OpenDB(postgres.HoldBegin(stdlib.GetConnector(*cfg)))
//	driver, err := postgres.NewSQL(ctx, db, postgres.Options{})
//
// database/sql sends BEGIN and COMMIT each in a round trip of its own, so
// a request that idem wins costs 5 round trips on a plain *sql.DB; on one
// opened through HoldBegin, NewSQL's transactions send BEGIN with the claim
// and the completing UPDATE with COMMIT, as the native pgx Driver does: 3,
// as many as the bare write. The caller's statements run through the *sql.Tx
// as always.
//
// What changes for all other code on that *sql.DB:
//
//   - BeginTx sends nothing. BEGIN goes with the first statement of the
//     transaction: alone in a round trip of its own before a statement sent
//     through database/sql (Exec, Query, Prepare, a prepared statement's
//     Exec or Query), with the claim for idem's. An error from BEGIN (the
//     connection is gone, say) is therefore returned by that first statement,
//     not by BeginTx; after it every statement fails with an error wrapping
//     idem.ErrTxDone (none runs outside the transaction), and so does
//     Commit. A level that pgx's driver refuses (sql.LevelLinearizable) is
//     still refused by BeginTx.
//   - A transaction that runs no statement sends nothing: its Commit and
//     Rollback cost no round trip and no server error can come back
//     (database/sql's own, such as a context's end, still can).
//   - The server's transaction starts at its first statement, not at
//     BeginTx: transaction_timestamp() (now()) and pg_stat_activity's
//     xact_start say when that statement came.
//   - In idem's transactions (NewSQL's Begin) the completing UPDATE is held
//     for COMMIT: it runs at Commit, in COMMIT's round trip; when it fails,
//     COMMIT is not reached, the transaction rolls back and Commit returns
//     its error. A statement sent before Commit runs after it.
//   - The connection that sql.Conn.Raw hands out is not a *stdlib.Conn: a
//     type assertion to *stdlib.Conn fails (and an unchecked one panics).
//     It has every method of one; assert to interface{ Conn() *pgx.Conn }
//     instead. Its Conn sends a held BEGIN first, so that what is sent on the
//     *pgx.Conn runs inside the transaction; when that fails it closes the
//     connection rather than let statements run outside it.
//   - A prepared statement that is executed (or prepared) in a transaction
//     sends a held BEGIN first, as any statement does.
//
// Connect fails, with an error wrapping idem.ErrInvalidConfig, when inner
// hands out connections other than pgx's *stdlib.Conn. The connector's
// Driver is inner's, so NewSQL accepts the *sql.DB.
func HoldBegin(inner driver.Connector) driver.Connector { return holdConnector{inner} }

// holdConnector opens stdlib connections that hold BEGIN back.
type holdConnector struct{ inner driver.Connector }

var _ io.Closer = holdConnector{}

func (c holdConnector) Connect(ctx context.Context) (driver.Conn, error) {
	if c.inner == nil {
		return nil, fmt.Errorf("postgres: HoldBegin: %w: nil driver.Connector", dialect.ErrInvalidConfig)
	}
	dc, err := c.inner.Connect(ctx)
	if err != nil {
		return nil, err
	}
	sc, ok := dc.(*stdlib.Conn)
	if !ok {
		_ = dc.Close()
		return nil, fmt.Errorf("postgres: HoldBegin: %w: the connector's connection is a %T, not pgx's *stdlib.Conn", dialect.ErrInvalidConfig, dc)
	}
	return &holdConn{sc: sc}, nil
}

// Driver returns the inner connector's driver (pgx's).
func (c holdConnector) Driver() driver.Driver {
	if c.inner == nil {
		return stdlib.GetDefaultDriver()
	}
	return c.inner.Driver()
}

// Close closes the inner connector when it has a Close (sql.DB.Close calls
// it).
func (c holdConnector) Close() error {
	if cl, ok := c.inner.(io.Closer); ok {
		return cl.Close()
	}
	return nil
}

// holdConn is a stdlib connection whose transactions are pgxTxs: BEGIN goes
// with their first statement, and a statement may be held for COMMIT.
type holdConn struct {
	sc *stdlib.Conn
	// tx is the transaction, nil outside one.
	tx *pgxTx
}

// The methods of *stdlib.Conn that need nothing more than it does.

func (c *holdConn) Close() error                               { return c.sc.Close() }
func (c *holdConn) Ping(ctx context.Context) error             { return c.sc.Ping(ctx) }
func (c *holdConn) CheckNamedValue(v *driver.NamedValue) error { return c.sc.CheckNamedValue(v) }

// BeginTx checks opts and sends nothing.
func (c *holdConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	if c.sc.Conn().IsClosed() {
		return nil, driver.ErrBadConn
	}
	o, err := txOptions(opts)
	if err != nil {
		return nil, err
	}
	c.tx = &pgxTx{ctx: ctx, conn: c.sc.Conn(), opts: o}
	return holdTx{c}, nil
}

// Begin begins with the default options.
func (c *holdConn) Begin() (driver.Tx, error) {
	return c.BeginTx(context.Background(), driver.TxOptions{})
}

// txOptions maps database/sql's options to pgx's as pgx's stdlib does.
func txOptions(opts driver.TxOptions) (pgx.TxOptions, error) {
	var o pgx.TxOptions
	switch l := sql.IsolationLevel(opts.Isolation); l {
	case sql.LevelDefault:
	case sql.LevelReadUncommitted:
		o.IsoLevel = pgx.ReadUncommitted
	case sql.LevelSnapshot:
		o.IsoLevel = pgx.RepeatableRead
	default:
		if o.IsoLevel = pgxLevel(l); o.IsoLevel == "" {
			return o, fmt.Errorf("postgres: unsupported isolation: %v", l)
		}
	}
	if opts.ReadOnly {
		o.AccessMode = pgx.ReadOnly
	}
	return o, nil
}

// flush sends what the transaction holds (BEGIN, a statement held for
// COMMIT), so that a statement after it runs in the transaction and after
// the held one.
func (c *holdConn) flush(ctx context.Context) error {
	if c.tx == nil {
		return nil
	}
	began := c.tx.tx != nil
	_, err := c.tx.ready(ctx)
	if err != nil && !began && !errors.Is(err, dialect.ErrTxDone) {
		return fmt.Errorf("postgres: held BEGIN: %w", err)
	}
	return err
}

func (c *holdConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	if err := c.flush(ctx); err != nil {
		return nil, err
	}
	return c.sc.ExecContext(ctx, query, args)
}

func (c *holdConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	if err := c.flush(ctx); err != nil {
		return nil, err
	}
	return c.sc.QueryContext(ctx, query, args)
}

func (c *holdConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	if err := c.flush(ctx); err != nil {
		return nil, err
	}
	st, err := c.sc.PrepareContext(ctx, query)
	if s, ok := st.(*stdlib.Stmt); ok {
		return holdStmt{Stmt: s, c: c}, err
	}
	return st, err
}

func (c *holdConn) Prepare(query string) (driver.Stmt, error) {
	return c.PrepareContext(context.Background(), query)
}

// Conn returns the *pgx.Conn, after sending what a transaction holds. When
// that fails it closes the connection, so that nothing meant for the
// transaction runs outside it.
func (c *holdConn) Conn() *pgx.Conn {
	conn := c.sc.Conn()
	if c.tx != nil {
		if err := c.flush(c.tx.ctx); err != nil {
			ctx, cancel := context.WithTimeout(context.WithoutCancel(c.tx.ctx), 5*time.Second)
			defer cancel()
			_ = conn.Close(ctx)
		}
	}
	return conn
}

// ResetSession discards a connection left inside a transaction, as stdlib's
// does (database/sql always ends one first).
func (c *holdConn) ResetSession(ctx context.Context) error {
	if c.tx != nil {
		return driver.ErrBadConn
	}
	return c.sc.ResetSession(ctx)
}

// holdStmt is a prepared statement that sends what its connection's
// transaction holds before it runs (it may have been prepared before the
// transaction began: sql.Tx.Stmt reuses it).
type holdStmt struct {
	*stdlib.Stmt
	c *holdConn
}

func (s holdStmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	if err := s.c.flush(ctx); err != nil {
		return nil, err
	}
	return s.Stmt.ExecContext(ctx, args)
}

func (s holdStmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	if err := s.c.flush(ctx); err != nil {
		return nil, err
	}
	return s.Stmt.QueryContext(ctx, args)
}

// holdTx ends a holdConn's transaction on BeginTx's context, as stdlib's
// transactions do.
type holdTx struct{ c *holdConn }

// Commit sends a held statement and COMMIT in one round trip; nothing when
// nothing was sent.
func (t holdTx) Commit() error {
	tx := t.c.tx
	t.c.tx = nil
	if tx == nil {
		return errTxDone
	}
	return tx.Commit(tx.ctx)
}

// Rollback rolls back; nothing is sent when nothing was.
func (t holdTx) Rollback() error {
	tx := t.c.tx
	t.c.tx = nil
	if tx == nil {
		return errTxDone
	}
	return tx.Rollback(tx.ctx)
}
