package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/dialect"
)

// Driver runs idem on a pgx connection pool; transactions are pgx.Tx.
type Driver struct {
	pool    *pgxpool.Pool
	opts    pgx.TxOptions
	dialect *Dialect
}

var _ dialect.Driver[pgx.Tx] = (*Driver)(nil)

// New returns a native pgx driver on pool.
func New(pool *pgxpool.Pool, opts Options) (*Driver, error) {
	if pool == nil {
		return nil, fmt.Errorf("postgres: %w: nil *pgxpool.Pool", idem.ErrInvalidConfig)
	}
	if err := opts.check(); err != nil {
		return nil, err
	}
	return &Driver{pool: pool, opts: pgx.TxOptions{IsoLevel: isoLevel(opts.Isolation)}, dialect: NewDialect()}, nil
}

func isoLevel(l sql.IsolationLevel) pgx.TxIsoLevel {
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

// Dialect returns the PostgreSQL dialect.
func (d *Driver) Dialect() dialect.Dialect { return d.dialect }

// Pool runs statements on the pool, outside any caller's transaction.
func (d *Driver) Pool() dialect.Queryer { return pgxQueryer{d.pool} }

// Wrap adapts a pgx transaction the caller began.
func (d *Driver) Wrap(tx pgx.Tx) (dialect.Queryer, error) { return PgxTx(tx) }

// Begin takes a connection from the pool for a transaction at the configured
// isolation level. BEGIN is not sent yet: it goes with the transaction's
// first statements (the claim) in one round trip.
func (d *Driver) Begin(ctx context.Context, opts dialect.BeginOptions) (dialect.Txn[pgx.Tx], error) {
	txOpts := d.opts
	if opts.Purge {
		txOpts.IsoLevel = pgx.ReadCommitted
	}
	conn, err := d.pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	return &pgxTxn{ctx: ctx, conn: conn, opts: txOpts}, nil
}

// PgxTx adapts a pgx.Tx to idem.Tx. It returns an error wrapping
// idem.ErrBadTx for a nil transaction; statements on a finished one fail
// with idem.ErrTxDone.
func PgxTx(tx pgx.Tx) (idem.Tx, error) {
	if tx == nil {
		return nil, fmt.Errorf("%w: nil pgx.Tx", dialect.ErrBadTx)
	}
	return pgxQueryer{tx}, nil
}

// pgxExecQuerier is what pgx.Tx, *pgx.Conn and *pgxpool.Pool have in common.
type pgxExecQuerier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults
}

type pgxQueryer struct{ q pgxExecQuerier }

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

// txClosed marks pgx.ErrTxClosed with the dialect meaning.
func txClosed(err error) error {
	if errors.Is(err, pgx.ErrTxClosed) {
		return dialect.Classified(dialect.ErrTxDone, err)
	}
	return err
}

// pgxRows gives pgx.Rows the Close() error of dialect.Rows.
type pgxRows struct{ pgx.Rows }

func (r pgxRows) Close() error {
	r.Rows.Close()
	return r.Rows.Err()
}

func (p pgxQueryer) sendBatch(ctx context.Context, b *pgx.Batch) error {
	return txClosed(p.q.SendBatch(ctx, b).Close())
}
