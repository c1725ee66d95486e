package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/dialect"
)

// Driver runs idem on a pgx connection pool; its transactions are pgx.Tx.
type Driver struct {
	pool    *pgxpool.Pool
	level   sql.IsolationLevel
	dialect *postgresDialect
}

var _ dialect.Driver[pgx.Tx] = (*Driver)(nil)

// New returns a Driver on pool, native pgx, after checking the server's
// version (ctx bounds that).
func New(ctx context.Context, pool *pgxpool.Pool, opts Options) (*Driver, error) {
	if pool == nil {
		return nil, fmt.Errorf("postgres: %w: nil *pgxpool.Pool", dialect.ErrInvalidConfig)
	}
	if err := checkIsolation(opts.Isolation); err != nil {
		return nil, err
	}
	d := &Driver{pool: pool, level: opts.Isolation, dialect: newDialect()}
	if err := checkServer(ctx, d.Pool()); err != nil {
		return nil, err
	}
	return d, nil
}

// pgxLevel maps a database/sql level to pgx's; "" is the server's default.
func pgxLevel(l sql.IsolationLevel) pgx.TxIsoLevel {
	switch l {
	case sql.LevelRepeatableRead:
		return pgx.RepeatableRead
	case sql.LevelSerializable:
		return pgx.Serializable
	case sql.LevelReadCommitted:
		return pgx.ReadCommitted
	}
	return ""
}

// DB returns the *pgxpool.Pool the driver runs on, as New was given it.
func (d *Driver) DB() *pgxpool.Pool { return d.pool }

// Dialect returns the PostgreSQL dialect: the statements idem runs.
func (d *Driver) Dialect() dialect.Dialect { return d.dialect }

// Pool runs idem's statements outside any caller's transaction, on the
// *pgxpool.Pool.
func (d *Driver) Pool() dialect.Queryer { return pgxQueryer{d.pool} }

// Wrap adapts a pgx.Tx the caller began on this database, for Store.Claim.
// It returns an error wrapping ErrBadTx for a nil transaction; statements
// on a finished one fail with ErrTxDone, and once a statement of the
// transaction failed idem's are not sent (ErrTxAborted, aborted.go).
func (d *Driver) Wrap(tx pgx.Tx) (dialect.Queryer, error) {
	if tx == nil {
		return nil, fmt.Errorf("%w: nil pgx.Tx", dialect.ErrBadTx)
	}
	return callerTx{pgxQueryer{tx}, tx}, nil
}

// callerTx is a caller's pgx.Tx that sends none of idem's statements once
// a statement of the transaction failed.
type callerTx struct {
	pgxQueryer
	tx pgx.Tx
}

var _ dialect.Pipeliner = callerTx{}

// failed reports errTxFailed when a statement of the transaction failed.
func (c callerTx) failed() error {
	conn := c.tx.Conn()
	if conn == nil || conn.IsClosed() {
		return nil // the statement reports what happened
	}
	return failed(conn.PgConn())
}

func (c callerTx) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	if err := c.failed(); err != nil {
		return 0, err
	}
	n, err := c.pgxQueryer.Exec(ctx, query, args...)
	return n, c.refused(err)
}

func (c callerTx) Query(ctx context.Context, query string, args ...any) (dialect.Rows, error) {
	if err := c.failed(); err != nil {
		return nil, err
	}
	rows, err := c.pgxQueryer.Query(ctx, query, args...)
	if err != nil {
		return nil, c.refused(err)
	}
	return standbyRows{rows, c.refused}, nil
}

func (c callerTx) Pipeline(ctx context.Context, stmts ...dialect.Statement) error {
	if err := c.failed(); err != nil {
		return err
	}
	return c.refused(c.pgxQueryer.Pipeline(ctx, stmts...))
}

// refused marks a hot standby's refusal to write (standby.go). It reads the
// session only after a 25006: the server has just answered, so the
// connection is still the transaction's.
func (c callerTx) refused(err error) error {
	if !readOnlyRefusal(err) {
		return err
	}
	var pc *pgconn.PgConn
	if conn := c.tx.Conn(); conn != nil && !conn.IsClosed() {
		pc = conn.PgConn()
	}
	return onStandby(pc, false, err)
}

// Begin starts a transaction at the asked isolation level (the configured
// one by default). It takes a connection from the pool but sends no BEGIN
// yet: BEGIN goes with the transaction's first statements (the claim) in
// one round trip, and the completing UPDATE with COMMIT. A COMMIT lost with
// its connection is reported as ErrCommitUnknown.
func (d *Driver) Begin(ctx context.Context, opts dialect.BeginOptions) (dialect.Tx[pgx.Tx], error) {
	level := opts.IsolationOr(d.level)
	if err := checkIsolation(level); err != nil {
		return nil, err
	}
	conn, err := d.pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	return &pgxTx{ctx: ctx, conn: conn.Conn(), release: conn.Release, opts: pgx.TxOptions{IsoLevel: pgxLevel(level)}}, nil
}

// pgxExecQuerier is what pgx.Tx, *pgx.Conn and *pgxpool.Pool have in common.
type pgxExecQuerier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	batchSender
}

// pgxQueryer is a dialect.Queryer and dialect.Pipeliner over pgx.
type pgxQueryer struct{ q pgxExecQuerier }

var _ dialect.Pipeliner = pgxQueryer{}

func (p pgxQueryer) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	tag, err := p.q.Exec(ctx, query, args...)
	if err != nil {
		return 0, txClosed(err)
	}
	return tag.RowsAffected(), nil
}

func (p pgxQueryer) Query(ctx context.Context, query string, args ...any) (dialect.Rows, error) {
	rows, err := p.q.Query(ctx, query, args...)
	if err != nil {
		return nil, txClosed(err)
	}
	return pgxRows{rows}, nil
}

// Pipeline sends stmts in one round trip.
func (p pgxQueryer) Pipeline(ctx context.Context, stmts ...dialect.Statement) error {
	return sendBatch(ctx, p.q, batchOf(stmts...))
}

// txClosed marks pgx.ErrTxClosed with the dialect meaning.
func txClosed(err error) error {
	if errors.Is(err, pgx.ErrTxClosed) {
		return dialect.Classified(dialect.ErrTxDone, err)
	}
	return err
}
