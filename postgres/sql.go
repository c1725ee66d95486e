package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/stdlib"

	"github.com/idemkit/idem/dialect"
)

// SQLDriver runs idem on a *sql.DB opened with pgx's database/sql driver
// (sql.Open("pgx", dsn), stdlib.OpenDB or stdlib.OpenDBFromPool); its
// transactions are *sql.Tx.
type SQLDriver struct {
	db      *sql.DB
	level   sql.IsolationLevel
	pool    dialect.Queryer
	dialect *postgresDialect
}

var _ dialect.Driver[*sql.Tx] = (*SQLDriver)(nil)

// NewSQL returns an SQLDriver on db, after checking the server's version
// (ctx bounds that). It refuses a *sql.DB of another driver
// (lib/pq's errors could not be classified).
func NewSQL(ctx context.Context, db *sql.DB, opts Options) (*SQLDriver, error) {
	if err := dialect.CheckSQLDB[*stdlib.Driver]("postgres", db, "github.com/jackc/pgx/v5/stdlib"); err != nil {
		return nil, err
	}
	if err := checkIsolation(opts.Isolation); err != nil {
		return nil, err
	}
	pool, err := dialect.NewSQLQueryer(db)
	if err != nil {
		return nil, err
	}
	if err := checkServer(ctx, pool); err != nil {
		return nil, err
	}
	return &SQLDriver{db: db, level: opts.Isolation, pool: pool, dialect: newDialect()}, nil
}

// DB returns the *sql.DB the driver runs on, as NewSQL was given it.
func (d *SQLDriver) DB() *sql.DB { return d.db }

// Dialect returns the PostgreSQL dialect: the statements idem runs.
func (d *SQLDriver) Dialect() dialect.Dialect { return d.dialect }

// Pool runs idem's statements outside any caller's transaction, on the
// *sql.DB.
func (d *SQLDriver) Pool() dialect.Queryer { return d.pool }

// Wrap adapts a *sql.Tx the caller began on this database, for
// Store.Claim. It returns an error wrapping ErrBadTx for a nil transaction;
// statements on a finished one fail with ErrTxDone.
func (d *SQLDriver) Wrap(tx *sql.Tx) (dialect.Queryer, error) { return dialect.NewSQLQueryer(tx) }

// Begin starts a transaction at the asked isolation level (the configured
// one by default). It runs on a connection of its own, so that statements
// that go together (a takeover's) are pipelined on it; database/sql sends
// BEGIN by itself. A COMMIT lost with its connection is reported as
// ErrCommitUnknown.
func (d *SQLDriver) Begin(ctx context.Context, opts dialect.BeginOptions) (dialect.Tx[*sql.Tx], error) {
	level := opts.IsolationOr(d.level)
	if err := checkIsolation(level); err != nil {
		return nil, err
	}
	tx, err := dialect.BeginSQL(ctx, d.db, dialect.SQLBegin{
		Options: &sql.TxOptions{Isolation: level}, CommitError: commitError, OwnConn: true,
	})
	if err != nil {
		return nil, err
	}
	return sqlTx{tx}, nil
}

// sqlTx pipelines statements on the transaction's connection.
type sqlTx struct{ *dialect.SQLTx }

var _ dialect.Pipeliner = sqlTx{}

// Pipeline sends stmts on the pgx connection under the transaction, in one
// round trip; the server runs them inside the transaction.
func (t sqlTx) Pipeline(ctx context.Context, stmts ...dialect.Statement) error {
	err := t.Conn().Raw(func(dc any) error {
		c, ok := dc.(*stdlib.Conn)
		if !ok {
			return fmt.Errorf("postgres: database/sql connection is a %T, not a *stdlib.Conn", dc)
		}
		// database/sql may have rolled the transaction back (its context
		// ended); the batch must never run outside it.
		if c.Conn().PgConn().TxStatus() == 'I' {
			return dialect.Classified(dialect.ErrTxDone, errors.New("postgres: the transaction has ended"))
		}
		return sendBatch(ctx, c.Conn(), batchOf(stmts...))
	})
	if errors.Is(err, sql.ErrConnDone) {
		return dialect.Classified(dialect.ErrTxDone, err)
	}
	return err
}
