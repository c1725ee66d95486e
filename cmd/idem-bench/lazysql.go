package main

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/idemkit/idem/dialect"
	"github.com/idemkit/idem/postgres"
)

// Can database/sql on PostgreSQL cost the round trips pgx costs (3 per won
// request instead of 5)?
//
// Not on a *sql.DB opened with pgx's stdlib driver as it is. database/sql
// begins a transaction by calling the driver's BeginTx, which pgx's stdlib
// answers by sending BEGIN and waiting for the reply, and it ends one by
// calling the driver's Commit, which sends COMMIT and waits. A *sql.Tx can
// come from nowhere else and end no other way (a Rollback is a round trip
// too, and a cancelled context makes pgx close the connection), and idem's
// own statements can only be sent on the raw connection between those two
// calls, never in their round trips: BEGIN, claim, the caller's INSERT,
// completion, COMMIT are 5. Sending BEGIN with the claim on the raw
// connection first does not help: BeginTx still sends its BEGIN (a no-op
// with a warning, but a round trip).
//
// It is possible when the *sql.DB is opened through a connector whose
// connections hold BEGIN back: lazyConnector below wraps stdlib's. Its
// BeginTx sends nothing; the first statement carries BEGIN (idem's claim,
// in one pipeline), a statement can be held for COMMIT (idem's completion),
// and a transaction that sent nothing ends without a round trip. A library
// could offer this as a constructor that opens the *sql.DB itself
// (postgres.OpenSQL(pgx.ConnConfig), say); lazyDriver is the driver idem
// would use on it. The user's own statements run through *sql.Tx as
// always; one that comes first sends BEGIN alone before it.

// lazyConnector opens stdlib connections that hold BEGIN back.
type lazyConnector struct{ inner driver.Connector }

func newLazyConnector(cfg pgx.ConnConfig) lazyConnector {
	return lazyConnector{inner: stdlib.GetConnector(cfg)}
}

func (c lazyConnector) Connect(ctx context.Context) (driver.Conn, error) {
	dc, err := c.inner.Connect(ctx)
	if err != nil {
		return nil, err
	}
	sc, ok := dc.(*stdlib.Conn)
	if !ok {
		_ = dc.Close()
		return nil, fmt.Errorf("lazy connector: stdlib returned a %T", dc)
	}
	return &lazyConn{Conn: sc}, nil
}

func (c lazyConnector) Driver() driver.Driver { return c.inner.Driver() }

// lazyConn is a stdlib connection whose transactions send BEGIN with their
// first statement and may send one held statement with COMMIT.
type lazyConn struct {
	*stdlib.Conn
	// begin is the BEGIN not sent yet ("" outside a transaction or once
	// sent).
	begin string
	// pending is the statement held for COMMIT.
	pending *dialect.Statement
}

var (
	_ driver.ConnBeginTx        = (*lazyConn)(nil)
	_ driver.ExecerContext      = (*lazyConn)(nil)
	_ driver.QueryerContext     = (*lazyConn)(nil)
	_ driver.ConnPrepareContext = (*lazyConn)(nil)
	_ driver.SessionResetter    = (*lazyConn)(nil)
	_ driver.NamedValueChecker  = (*lazyConn)(nil)
	_ driver.Pinger             = (*lazyConn)(nil)
)

// beginSQL is the BEGIN statement for database/sql transaction options.
func beginSQL(opts driver.TxOptions) (string, error) {
	s := "begin"
	switch sql.IsolationLevel(opts.Isolation) {
	case sql.LevelDefault:
	case sql.LevelReadUncommitted:
		s += " isolation level read uncommitted"
	case sql.LevelReadCommitted:
		s += " isolation level read committed"
	case sql.LevelRepeatableRead, sql.LevelSnapshot:
		s += " isolation level repeatable read"
	case sql.LevelSerializable:
		s += " isolation level serializable"
	default:
		return "", fmt.Errorf("unsupported isolation: %v", opts.Isolation)
	}
	if opts.ReadOnly {
		s += " read only"
	}
	return s, nil
}

// BeginTx holds BEGIN back: nothing is sent.
func (c *lazyConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	if c.Conn.Conn().IsClosed() {
		return nil, driver.ErrBadConn
	}
	s, err := beginSQL(opts)
	if err != nil {
		return nil, err
	}
	c.begin, c.pending = s, nil
	return &lazyTx{c: c, ctx: ctx}, nil
}

func (c *lazyConn) Begin() (driver.Tx, error) {
	return c.BeginTx(context.Background(), driver.TxOptions{})
}

// flush sends what is held, so that a statement after it runs after it.
func (c *lazyConn) flush(ctx context.Context) error {
	if c.begin == "" && c.pending == nil {
		return nil
	}
	return c.send(ctx, nil, false)
}

func (c *lazyConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	if err := c.flush(ctx); err != nil {
		return nil, err
	}
	return c.Conn.ExecContext(ctx, query, args)
}

func (c *lazyConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	if err := c.flush(ctx); err != nil {
		return nil, err
	}
	return c.Conn.QueryContext(ctx, query, args)
}

func (c *lazyConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	// A prepared statement runs on the connection directly: BEGIN first.
	if err := c.flush(ctx); err != nil {
		return nil, err
	}
	return c.Conn.PrepareContext(ctx, query)
}

func (c *lazyConn) Prepare(query string) (driver.Stmt, error) {
	return c.PrepareContext(context.Background(), query)
}

// pipeline sends stmts in one round trip, after what is held.
func (c *lazyConn) pipeline(ctx context.Context, stmts []dialect.Statement) error {
	return c.send(ctx, stmts, false)
}

// hold keeps stmt for COMMIT. It declines before BEGIN was sent (the
// statement would run before it) and when one is already held.
func (c *lazyConn) hold(stmt dialect.Statement) bool {
	if c.begin != "" || c.pending != nil || c.Conn.Conn().PgConn().TxStatus() != 'T' {
		return false
	}
	c.pending = &stmt
	return true
}

// send sends, in one round trip: the held BEGIN, the held statement, stmts
// and, when commit is set, COMMIT.
func (c *lazyConn) send(ctx context.Context, stmts []dialect.Statement, commit bool) error {
	b := &pgx.Batch{}
	began := c.begin != ""
	if began {
		b.Queue(c.begin)
		c.begin = ""
	}
	if c.pending != nil {
		queueStatement(b, *c.pending)
		c.pending = nil
	}
	for _, s := range stmts {
		queueStatement(b, s)
	}
	var tag pgconn.CommandTag
	if commit {
		b.Queue("commit").Exec(func(ct pgconn.CommandTag) error { tag = ct; return nil })
	}
	if len(b.QueuedQueries) == 0 {
		return nil
	}
	conn := c.Conn.Conn()
	err := conn.SendBatch(ctx, b).Close()
	if err == nil && commit && tag.String() == "ROLLBACK" {
		err = errRolledBack
	}
	if err != nil && began && !commit && conn.PgConn().TxStatus() == 'I' {
		// BEGIN itself failed: there is no transaction to end.
		return fmt.Errorf("begin: %w", err)
	}
	return err
}

// lazyTx ends a lazyConn's transaction.
type lazyTx struct {
	c   *lazyConn
	ctx context.Context // BeginTx's, as stdlib's transactions use it
}

// Commit sends a held statement and COMMIT in one round trip; nothing when
// BEGIN was never sent.
func (t *lazyTx) Commit() error {
	c := t.c
	if c.begin != "" {
		c.begin, c.pending = "", nil
		return nil
	}
	err := c.send(t.ctx, nil, true)
	if err != nil && c.Conn.Conn().PgConn().TxStatus() != 'I' {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(t.ctx), 5*time.Second)
		defer cancel()
		_, _ = c.Conn.Conn().Exec(rctx, "rollback")
	}
	return err
}

// Rollback rolls back; nothing is sent when BEGIN never was.
func (t *lazyTx) Rollback() error {
	c := t.c
	if c.begin != "" {
		c.begin, c.pending = "", nil
		return nil
	}
	c.pending = nil
	_, err := c.Conn.Conn().Exec(t.ctx, "rollback")
	return err
}

// queueStatement queues s in b with its result handling.
func queueStatement(b *pgx.Batch, s dialect.Statement) {
	qq := b.Queue(s.SQL, s.Args...)
	switch {
	case s.Rows != nil:
		qq.Query(func(rows pgx.Rows) error { return s.Rows(pgxRows{rows}) })
	case s.Affected != nil:
		qq.Exec(func(ct pgconn.CommandTag) error { return s.Affected(ct.RowsAffected()) })
	}
}

// pgxRows gives pgx.Rows the Close() error of dialect.Rows.
type pgxRows struct{ pgx.Rows }

func (r pgxRows) Close() error {
	r.Rows.Close()
	return r.Rows.Err()
}

// lazyDriver runs idem on a *sql.DB opened through lazyConnector, with the
// PostgreSQL dialect: its transactions pipeline BEGIN with the claim and
// hold the completion for COMMIT, as the pgx driver's do.
type lazyDriver struct {
	db   *sql.DB
	pool dialect.Queryer
	d    dialect.Dialect
}

var _ dialect.Driver[*sql.Tx] = (*lazyDriver)(nil)

func newLazyDriver(db *sql.DB) (*lazyDriver, error) {
	if _, ok := db.Driver().(*stdlib.Driver); !ok {
		return nil, fmt.Errorf("lazy driver: *sql.DB uses %T", db.Driver())
	}
	pool, err := dialect.NewSQLQueryer(db)
	if err != nil {
		return nil, err
	}
	return &lazyDriver{db: db, pool: pool, d: postgres.NewDialect()}, nil
}

func (d *lazyDriver) Dialect() dialect.Dialect { return d.d }
func (d *lazyDriver) Pool() dialect.Queryer    { return d.pool }

func (d *lazyDriver) Wrap(tx *sql.Tx) (dialect.Queryer, error) {
	if tx == nil {
		return nil, fmt.Errorf("%w: nil *sql.Tx", dialect.ErrBadTx)
	}
	return dialect.NewSQLQueryer(tx)
}

// Begin begins on a connection of its own; nothing is sent yet.
func (d *lazyDriver) Begin(ctx context.Context, opts dialect.BeginOptions) (dialect.Tx[*sql.Tx], error) {
	conn, err := d.db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	tx, err := conn.BeginTx(ctx, &sql.TxOptions{Isolation: opts.IsolationOr(sql.LevelDefault)})
	if err != nil {
		conn.Close()
		return nil, err
	}
	return &lazySQLTx{SQLTx: dialect.NewSQLTx(ctx, tx, lazyCommitError, func() { conn.Close() }), conn: conn}, nil
}

// lazySQLTx is a transaction of lazyDriver: a dialect.Pipeliner and a
// dialect.CommitDeferrer through its connection.
type lazySQLTx struct {
	*dialect.SQLTx
	conn *sql.Conn
}

var (
	_ dialect.Pipeliner      = (*lazySQLTx)(nil)
	_ dialect.CommitDeferrer = (*lazySQLTx)(nil)
)

func (t *lazySQLTx) raw(fn func(c *lazyConn) error) error {
	err := t.conn.Raw(func(dc any) error {
		c, ok := dc.(*lazyConn)
		if !ok {
			return fmt.Errorf("lazy driver: connection is a %T", dc)
		}
		return fn(c)
	})
	if errors.Is(err, sql.ErrConnDone) {
		return dialect.Classified(dialect.ErrTxDone, err)
	}
	return err
}

// Pipeline sends stmts in one round trip, with BEGIN when it is held.
func (t *lazySQLTx) Pipeline(ctx context.Context, stmts ...dialect.Statement) error {
	return t.raw(func(c *lazyConn) error { return c.pipeline(ctx, stmts) })
}

// DeferToCommit holds stmt for COMMIT.
func (t *lazySQLTx) DeferToCommit(stmt dialect.Statement) bool {
	held := false
	_ = t.raw(func(c *lazyConn) error { held = c.hold(stmt); return nil })
	return held
}

// lazyCommitError tells a COMMIT that failed for sure from one whose
// outcome is unknown (the connection broke after it left), and a held
// completion that found nothing to complete.
func lazyCommitError(err error) error {
	var pe *pgconn.PgError
	switch {
	case errors.As(err, &pe) && pe.Code == "22012":
		return dialect.Classified(dialect.ErrNotClaimed, err)
	case errors.As(err, &pe), errors.Is(err, errRolledBack), dialect.IsClassified(err):
		return err
	}
	return dialect.Classified(dialect.ErrCommitUnknown, err)
}
