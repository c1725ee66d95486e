package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

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

// Begin starts a transaction at the configured isolation level on a
// connection of its own, so that statements that go together (a takeover's)
// can be pipelined on it (database/sql sends BEGIN by itself).
func (d *SQLDriver) Begin(ctx context.Context, opts dialect.BeginOptions) (dialect.Txn[*sql.Tx], error) {
	txOpts := d.opts
	if opts.Purge {
		txOpts.Isolation = sql.LevelReadCommitted
	}
	conn, err := d.db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	tx, err := conn.BeginTx(ctx, &txOpts)
	if err != nil {
		conn.Close()
		return nil, err
	}
	return sqlTxn{SQLTxn: idem.NewSQLTxn(tx, func() { conn.Close() }), conn: conn, ctx: ctx}, nil
}

// sqlTxn reports a COMMIT lost with its connection as ErrCommitUnknown, and
// pipelines statements on the transaction's connection.
type sqlTxn struct {
	*idem.SQLTxn
	conn *sql.Conn
	ctx  context.Context // BeginTx's: it ends the transaction
}

// Commit tells a known failure from an unknown outcome. database/sql sends
// no COMMIT once the transaction's context has ended (it rolls back): that
// failure is known. Once COMMIT was sent, pgx's stdlib commits on that same
// context, so its ending interrupts the COMMIT in flight: only a server
// error is then a known failure.
func (t sqlTxn) Commit(ctx context.Context) error {
	if err := t.ctx.Err(); err != nil {
		_ = t.SQLTxn.Rollback(context.WithoutCancel(ctx))
		return fmt.Errorf("postgres: COMMIT not sent, the transaction's context ended: %w", err)
	}
	err := t.SQLTxn.Commit(ctx)
	if errors.Is(err, sql.ErrTxDone) {
		return err
	}
	return commitError(err)
}

// sendBatch sends b on the pgx connection under the transaction; the
// server runs it inside the transaction.
func (t sqlTxn) sendBatch(ctx context.Context, b *pgx.Batch) error {
	err := t.conn.Raw(func(dc any) error {
		c, ok := dc.(*stdlib.Conn)
		if !ok {
			return fmt.Errorf("postgres: database/sql connection is a %T, not a *stdlib.Conn", dc)
		}
		// database/sql may have rolled the transaction back (its context
		// ended); the batch must never run outside it.
		if c.Conn().PgConn().TxStatus() == 'I' {
			return dialect.Classified(dialect.ErrTxDone, errors.New("postgres: the transaction has ended"))
		}
		return c.Conn().SendBatch(ctx, b).Close()
	})
	if errors.Is(err, sql.ErrConnDone) {
		return dialect.Classified(dialect.ErrTxDone, err)
	}
	return err
}
