package postgres

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/jackc/pgx/v5/stdlib"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/dialect"
)

// SQLDriver runs idem on a *sql.DB opened with pgx's database/sql driver
// (sql.Open("pgx", dsn), stdlib.OpenDB or stdlib.OpenDBFromPool);
// transactions are *sql.Tx.
type SQLDriver struct {
	db      *sql.DB
	opts    sql.TxOptions
	pool    idem.Tx
	dialect *Dialect
}

var _ dialect.Driver[*sql.Tx] = (*SQLDriver)(nil)

// NewSQL returns a database/sql driver on db. It refuses a *sql.DB of
// another driver (lib/pq's errors could not be classified).
func NewSQL(db *sql.DB, opts Options) (*SQLDriver, error) {
	if db == nil {
		return nil, fmt.Errorf("postgres: %w: nil *sql.DB", idem.ErrInvalidConfig)
	}
	if _, ok := db.Driver().(*stdlib.Driver); !ok {
		return nil, fmt.Errorf("postgres: %w: *sql.DB uses driver %T, not github.com/jackc/pgx/v5/stdlib", idem.ErrInvalidConfig, db.Driver())
	}
	if err := opts.check(); err != nil {
		return nil, err
	}
	pool, err := idem.SQL(db)
	if err != nil {
		return nil, err
	}
	return &SQLDriver{db: db, opts: sql.TxOptions{Isolation: opts.Isolation}, pool: pool, dialect: NewDialect()}, nil
}

// Dialect returns the PostgreSQL dialect.
func (d *SQLDriver) Dialect() dialect.Dialect { return d.dialect }

// Pool runs statements on the *sql.DB.
func (d *SQLDriver) Pool() dialect.Queryer { return d.pool }

// Wrap adapts a *sql.Tx the caller began on this database.
func (d *SQLDriver) Wrap(tx *sql.Tx) (dialect.Queryer, error) {
	if tx == nil {
		return nil, fmt.Errorf("%w: nil *sql.Tx", dialect.ErrBadTx)
	}
	return idem.SQL(tx)
}

// Begin starts a transaction at the configured isolation level.
func (d *SQLDriver) Begin(ctx context.Context, opts dialect.BeginOptions) (dialect.Txn[*sql.Tx], error) {
	txOpts := d.opts
	if opts.Purge {
		txOpts.Isolation = sql.LevelReadCommitted
	}
	tx, err := d.db.BeginTx(ctx, &txOpts)
	if err != nil {
		return nil, err
	}
	return sqlTxn{idem.NewSQLTxn(tx, nil)}, nil
}

// sqlTxn reports a COMMIT lost with its connection as ErrCommitUnknown.
type sqlTxn struct{ *idem.SQLTxn }

func (t sqlTxn) Commit(ctx context.Context) error { return commitError(t.SQLTxn.Commit(ctx)) }
