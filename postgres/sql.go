package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
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
	// held is set when db's connections hold BEGIN back (HoldBegin).
	held bool
}

var _ dialect.Driver[*sql.Tx] = (*SQLDriver)(nil)

// NewSQL returns an SQLDriver on db, after checking the server's version
// (ctx bounds that). It refuses a *sql.DB of another driver
// (lib/pq's errors could not be classified). On a *sql.DB opened through
// HoldBegin, its transactions send BEGIN with the claim and the completion
// with COMMIT.
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
	held, err := holdsBegin(ctx, db)
	if err != nil {
		return nil, err
	}
	return &SQLDriver{db: db, level: opts.Isolation, pool: pool, dialect: newDialect(), held: held}, nil
}

// holdsBegin reports whether db's connections come from HoldBegin: all of
// a *sql.DB's come from one connector.
func holdsBegin(ctx context.Context, db *sql.DB) (bool, error) {
	conn, err := db.Conn(ctx)
	if err != nil {
		return false, fmt.Errorf("postgres: inspect connection: %w", err)
	}
	defer conn.Close()
	held := false
	err = conn.Raw(func(dc any) error { _, held = dc.(*holdConn); return nil })
	return held, err
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
// BEGIN by itself, unless the connection holds it back (HoldBegin): then
// BEGIN goes with the claim and the completing UPDATE with COMMIT, as with
// the pgx Driver. A COMMIT lost with its connection is reported as
// ErrCommitUnknown.
func (d *SQLDriver) Begin(ctx context.Context, opts dialect.BeginOptions) (dialect.Tx[*sql.Tx], error) {
	level := opts.IsolationOr(d.level)
	if err := checkIsolation(level); err != nil {
		return nil, err
	}
	commitErr := sqlCommitError
	if d.held {
		commitErr = commitError // the pgxTx underneath read COMMIT's result
	}
	tx, err := dialect.BeginSQL(ctx, d.db, dialect.SQLBegin{
		Options: &sql.TxOptions{Isolation: level}, CommitError: commitErr, OwnConn: true,
	})
	if err != nil {
		return nil, err
	}
	if d.held {
		return heldSQLTx{tx}, nil
	}
	return sqlTx{tx}, nil
}

// sqlTx pipelines statements on the transaction's connection, and sends
// none once a statement of the transaction failed (aborted.go).
type sqlTx struct{ *dialect.SQLTx }

var _ dialect.Pipeliner = sqlTx{}

// failed reports errTxFailed when a statement of the transaction failed.
func (t sqlTx) failed() error {
	return onConn(t.Conn(), func(c *stdlib.Conn) error { return failed(c.Conn().PgConn()) })
}

// Exec runs a statement of idem's in the transaction, unless a statement
// failed before (errTxFailed).
func (t sqlTx) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	if err := t.failed(); err != nil {
		return 0, err
	}
	n, err := t.SQLTx.Exec(ctx, query, args...)
	return n, refusedOn(t.Conn(), err)
}

// Query runs a query of idem's in the transaction, unless a statement
// failed before (errTxFailed).
func (t sqlTx) Query(ctx context.Context, query string, args ...any) (dialect.Rows, error) {
	if err := t.failed(); err != nil {
		return nil, err
	}
	rows, err := t.SQLTx.Query(ctx, query, args...)
	return rows, refusedOn(t.Conn(), err)
}

// refusedOn marks a hot standby's refusal to write (standby.go) on the
// database/sql connection under a transaction. It reads the session only
// after a 25006, which is rare.
func refusedOn(conn *sql.Conn, err error) error {
	if !readOnlyRefusal(err) {
		return err
	}
	var pc *pgconn.PgConn
	_ = conn.Raw(func(dc any) error {
		var c *pgx.Conn
		switch dc := dc.(type) {
		case *stdlib.Conn:
			c = dc.Conn()
		case *holdConn:
			c = dc.sc.Conn() // not dc.Conn(), which would send what is held
		}
		if c != nil && !c.IsClosed() {
			pc = c.PgConn()
		}
		return nil
	})
	return onStandby(pc, false, err)
}

// Pipeline sends stmts on the pgx connection under the transaction, in one
// round trip; the server runs them inside the transaction.
func (t sqlTx) Pipeline(ctx context.Context, stmts ...dialect.Statement) error {
	return onConn(t.Conn(), func(c *stdlib.Conn) error {
		// database/sql may have rolled the transaction back (its context
		// ended); the batch must never run outside it.
		if c.Conn().PgConn().TxStatus() == 'I' {
			return errEnded
		}
		if err := failed(c.Conn().PgConn()); err != nil {
			return err
		}
		was := inHotStandby(c.Conn().PgConn())
		return onStandby(c.Conn().PgConn(), was, sendBatch(ctx, c.Conn(), batchOf(stmts...)))
	})
}

var errEnded = dialect.Classified(dialect.ErrTxDone, errors.New("postgres: the transaction has ended"))

// heldSQLTx is a transaction on a HoldBegin connection: its pgxTx sends
// BEGIN with the first pipeline and holds a statement for COMMIT.
type heldSQLTx struct{ *dialect.SQLTx }

var (
	_ dialect.Pipeliner      = heldSQLTx{}
	_ dialect.CommitDeferrer = heldSQLTx{}
)

// Pipeline sends stmts in one round trip, with BEGIN when it is held.
func (t heldSQLTx) Pipeline(ctx context.Context, stmts ...dialect.Statement) error {
	return onConn(t.Conn(), func(c *holdConn) error {
		if c.tx == nil {
			return errEnded
		}
		return c.tx.Pipeline(ctx, stmts...)
	})
}

// Exec runs a statement of idem's in the transaction.
func (t heldSQLTx) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	n, err := t.SQLTx.Exec(ctx, query, args...)
	return n, refusedOn(t.Conn(), err)
}

// Query runs a query of idem's in the transaction.
func (t heldSQLTx) Query(ctx context.Context, query string, args ...any) (dialect.Rows, error) {
	rows, err := t.SQLTx.Query(ctx, query, args...)
	return rows, refusedOn(t.Conn(), err)
}

// DeferToCommit holds stmt for COMMIT; it declines before BEGIN was sent.
func (t heldSQLTx) DeferToCommit(stmt dialect.Statement) bool {
	held := false
	_ = onConn(t.Conn(), func(c *holdConn) error {
		held = c.tx != nil && c.tx.DeferToCommit(stmt)
		return nil
	})
	return held
}

// onConn runs fn on the transaction's database/sql connection, which must
// be a C.
func onConn[C any](conn *sql.Conn, fn func(C) error) error {
	err := conn.Raw(func(dc any) error {
		c, ok := dc.(C)
		if !ok {
			return fmt.Errorf("postgres: database/sql connection is a %T, not a %T", dc, *new(C))
		}
		return fn(c)
	})
	if errors.Is(err, sql.ErrConnDone) {
		return dialect.Classified(dialect.ErrTxDone, err)
	}
	return err
}
