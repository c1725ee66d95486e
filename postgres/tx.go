package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemkit/idem/dialect"
)

// pgxTx is the transaction the pgx Driver begins for the core, and the one
// under every database/sql transaction on a HoldBegin connection. It saves
// the round trips that carry nothing but transaction control:
//
//   - BEGIN is sent with the first statements, in one pipeline (pgx's
//     Batch.BeginTx), so BEGIN and the claim cost one round trip;
//   - the completing UPDATE is held back and sent with COMMIT, in one
//     pipeline. It is guarded to fail when it updates no row, and a pipeline
//     stops at its first error, so the effect never commits without its
//     record.
//
// Native hands out the pgx transaction (beginning it first if no statement
// has run yet). After the transaction ends it reports pgx.ErrTxClosed, as a
// pgx transaction does.
type pgxTx struct {
	ctx  context.Context // Begin's, for a BEGIN that Native sends alone
	conn *pgx.Conn       // nil once the transaction ended
	// release gives the connection back when the transaction ends (a
	// pool's); nil for a connection database/sql owns (HoldBegin).
	release func()
	opts    pgx.TxOptions
	tx      pgx.Tx // set once BEGIN was sent
	// native is what Native returned; it is closed when the transaction
	// ends.
	native *nativeTx
	done   bool
	// pending is the completing statement, sent with COMMIT.
	pending *dialect.Statement
	// refusedByStandby: a hot standby refused a statement; the pool's
	// connection is closed rather than released (standby.go).
	refusedByStandby bool
}

var (
	_ dialect.Tx[pgx.Tx]     = (*pgxTx)(nil)
	_ dialect.Pipeliner      = (*pgxTx)(nil)
	_ dialect.CommitDeferrer = (*pgxTx)(nil)
)

// closedTx is a pgx transaction that is already closed: every method
// reports pgx.ErrTxClosed. It holds no connection, so one serves all.
var closedTx = func() pgx.Tx {
	b := &pgx.Batch{}
	b.BeginTx(pgx.TxOptions{})
	return pgx.FailedBatchResults(b, pgx.ErrTxClosed).Tx()
}()

var errTxDone = dialect.Classified(dialect.ErrTxDone, pgx.ErrTxClosed)

// rollbackTimeout bounds the ROLLBACK after a failed COMMIT.
const rollbackTimeout = 5 * time.Second

// begin sends BEGIN on its own, for statements that cannot carry it.
func (t *pgxTx) begin(ctx context.Context) error {
	if t.done {
		return errTxDone
	}
	if t.tx != nil {
		return nil
	}
	tx, err := t.conn.BeginTx(ctx, t.opts)
	if err != nil {
		t.finish()
		return err
	}
	t.tx = tx
	return nil
}

// ready begins the transaction if needed and sends a held-back statement,
// so that a statement that follows runs after it.
func (t *pgxTx) ready(ctx context.Context) (pgxQueryer, error) {
	if err := t.begin(ctx); err != nil {
		return pgxQueryer{}, err
	}
	if p := t.pending; p != nil {
		t.pending = nil
		if err := sendBatch(ctx, t.tx, batchOf(*p)); err != nil {
			return pgxQueryer{}, completionError(err)
		}
	}
	return pgxQueryer{t.tx}, nil
}

func (t *pgxTx) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	was := t.standby()
	n, err := t.exec(ctx, query, args...)
	return n, t.refused(was, err)
}

func (t *pgxTx) exec(ctx context.Context, query string, args ...any) (int64, error) {
	if t.tx == nil && !t.done {
		// The first statement (a purge batch's DELETE): send BEGIN with it.
		var n int64
		err := t.Pipeline(ctx, dialect.Statement{SQL: query, Args: args, Affected: func(rows int64) error { n = rows; return nil }})
		return n, err
	}
	q, err := t.ready(ctx)
	if err != nil {
		return 0, err
	}
	return q.Exec(ctx, query, args...)
}

func (t *pgxTx) Query(ctx context.Context, query string, args ...any) (dialect.Rows, error) {
	was := t.standby()
	q, err := t.ready(ctx)
	if err != nil {
		return nil, t.refused(was, err)
	}
	rows, err := q.Query(ctx, query, args...)
	if err != nil {
		return nil, t.refused(was, err)
	}
	return standbyRows{rows, func(err error) error { return t.refused(was, err) }}, nil
}

// Pipeline sends stmts in one round trip, with BEGIN in front of them when
// the transaction has not begun.
func (t *pgxTx) Pipeline(ctx context.Context, stmts ...dialect.Statement) error {
	was := t.standby()
	return t.refused(was, t.pipeline(ctx, stmts...))
}

// standby reports whether the server of the transaction's connection last
// said it is a hot standby.
func (t *pgxTx) standby() bool {
	return t.conn != nil && inHotStandby(t.conn.PgConn())
}

// refused marks a hot standby's refusal to write (standby.go): was is
// standby() before the statement was sent. Once the transaction ended its
// connection is back in the pool, another's: only was counts then. A
// session a standby refused is closed when the transaction ends.
func (t *pgxTx) refused(was bool, err error) error {
	var conn *pgconn.PgConn
	if t.conn != nil {
		conn = t.conn.PgConn()
	}
	err = onStandby(conn, was, err)
	var se *standbyError
	if errors.As(err, &se) {
		t.refusedByStandby = true
	}
	return err
}

func (t *pgxTx) pipeline(ctx context.Context, stmts ...dialect.Statement) error {
	if t.done {
		return errTxDone
	}
	b := batchOf(stmts...)
	if t.tx != nil || t.pending != nil {
		q, err := t.ready(ctx)
		if err != nil {
			return err
		}
		return sendBatch(ctx, q.q, b)
	}
	withBegin := &pgx.Batch{QueuedQueries: make([]*pgx.QueuedQuery, 0, len(b.QueuedQueries)+1)}
	withBegin.BeginTx(t.opts)
	withBegin.QueuedQueries = append(withBegin.QueuedQueries, b.QueuedQueries...)
	br := t.conn.SendBatch(ctx, withBegin)
	tx := br.Tx()
	err := br.Close()
	if t.conn.PgConn().TxStatus() == 'I' || t.conn.IsClosed() {
		// BEGIN itself failed: no transaction is open.
		t.finish()
		return err
	}
	t.tx = tx
	return err
}

// DeferToCommit holds the completing statement back for Commit. It declines
// before BEGIN was sent and when a statement is already held.
func (t *pgxTx) DeferToCommit(stmt dialect.Statement) bool {
	if t.done || t.tx == nil || t.pending != nil {
		return false
	}
	t.pending = &stmt
	return true
}

// Native returns the pgx transaction for the caller's statements.
func (t *pgxTx) Native() pgx.Tx {
	if t.native == nil {
		t.native = &nativeTx{Tx: closedTx}
	}
	if !t.done && t.tx == nil {
		if err := t.begin(t.ctx); err != nil {
			t.native.err = err
		}
	}
	if !t.done {
		t.native.Tx = t.tx
	}
	return t.native
}

// Commit commits, sending a held-back completion in the same round trip.
func (t *pgxTx) Commit(ctx context.Context) error {
	if t.done {
		return errTxDone
	}
	if t.tx == nil {
		// Nothing was sent: there is nothing to commit.
		t.finish()
		return nil
	}
	if t.conn.PgConn().TxStatus() == 'I' {
		// The caller's function ended the transaction (pgx's Commit or
		// Rollback, or a statement of its own): a COMMIT now would commit
		// nothing and report success.
		t.finish()
		return errTxDone
	}
	if err := ctx.Err(); err != nil {
		// pgx sends nothing on an ended context: the COMMIT does not
		// leave, so the failure is known (dialect.Tx.Commit).
		t.end(ctx)
		return fmt.Errorf("postgres: COMMIT not sent, the transaction's context ended: %w", err)
	}
	var (
		tag pgconn.CommandTag
		err error
	)
	if p := t.pending; p == nil {
		// COMMIT alone, as pgx.Tx.Commit sends it, but keeping its tag.
		tag, err = t.conn.Exec(ctx, "commit")
	} else {
		t.pending = nil
		b := batchOf(*p)
		b.Queue("commit").Exec(func(ct pgconn.CommandTag) error { tag = ct; return nil })
		err = sendBatch(ctx, t.tx, b)
	}
	switch tag.String() {
	case "COMMIT":
		// The server reported the COMMIT done, so it committed, whatever
		// error follows: a server shutting down ends the session with a
		// FATAL (SQLSTATE 57P01) right after the COMMIT's result when its
		// signal came while the COMMIT ran.
		t.finish()
		return nil
	case "ROLLBACK":
		if err == nil {
			err = pgx.ErrTxCommitRollback
		}
	}
	// pgx refuses to send on a context that ended meanwhile, and on a
	// connection busy or closed before the COMMIT: it calls such an error
	// safe to retry. Once the COMMIT left, a lost answer closes the
	// connection, so a connection still open says it never left.
	notSent := pgconn.SafeToRetry(err) && !t.conn.IsClosed()
	t.end(ctx)
	if notSent {
		return fmt.Errorf("postgres: COMMIT not sent: %w", err)
	}
	return commitError(completionError(err))
}

// end ends a transaction whose COMMIT failed or was not sent, and finishes
// it.
func (t *pgxTx) end(ctx context.Context) {
	if t.conn.PgConn().TxStatus() != 'I' {
		// The pipeline stopped before COMMIT, COMMIT was not sent, or the
		// connection broke: end the transaction (pgx closes a connection
		// it cannot end it on), within a bound of its own, since ctx may
		// have ended.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
		_ = t.tx.Rollback(rctx)
		cancel()
	}
	t.finish()
}

// Rollback rolls back; it does nothing after Commit or Rollback.
func (t *pgxTx) Rollback(ctx context.Context) error {
	if t.done {
		return nil
	}
	var err error
	if t.tx != nil {
		err = t.tx.Rollback(ctx)
	}
	t.finish()
	if errors.Is(err, pgx.ErrTxClosed) {
		return nil
	}
	return err
}

// finish ends the transaction's use of the connection and closes what
// Native handed out.
func (t *pgxTx) finish() {
	t.done = true
	t.pending = nil
	if t.native != nil {
		t.native.Tx = closedTx
	}
	if t.release != nil {
		if t.refusedByStandby && t.conn != nil {
			// Not back to the pool: the next session goes where the
			// router points now (standby.go).
			ctx, cancel := context.WithTimeout(context.Background(), rollbackTimeout)
			_ = t.conn.Close(ctx)
			cancel()
		}
		t.release() // a pool closes a connection left inside a transaction
		t.release = nil
	}
	t.conn = nil
}

// nativeTx is the pgx.Tx Native hands out. It forwards to the transaction,
// and to a closed one once the transaction has ended. When BEGIN failed,
// every statement reports that error.
type nativeTx struct {
	pgx.Tx
	err error
}

func (n *nativeTx) Begin(ctx context.Context) (pgx.Tx, error) {
	if n.err != nil {
		return nil, n.err
	}
	return n.Tx.Begin(ctx)
}

func (n *nativeTx) Commit(ctx context.Context) error {
	if n.err != nil {
		return n.err
	}
	return n.Tx.Commit(ctx)
}

func (n *nativeTx) Rollback(ctx context.Context) error {
	if n.err != nil {
		return n.err
	}
	return n.Tx.Rollback(ctx)
}

func (n *nativeTx) CopyFrom(ctx context.Context, table pgx.Identifier, columns []string, src pgx.CopyFromSource) (int64, error) {
	if n.err != nil {
		return 0, n.err
	}
	return n.Tx.CopyFrom(ctx, table, columns, src)
}

func (n *nativeTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	if n.err != nil {
		return pgx.FailedBatchResults(b, n.err)
	}
	return n.Tx.SendBatch(ctx, b)
}

func (n *nativeTx) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	if n.err != nil {
		return nil, n.err
	}
	return n.Tx.Prepare(ctx, name, sql)
}

func (n *nativeTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if n.err != nil {
		return pgconn.CommandTag{}, n.err
	}
	return n.Tx.Exec(ctx, sql, args...)
}

func (n *nativeTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if n.err != nil {
		rows, _ := closedTx.Query(ctx, sql, args...)
		return rows, n.err
	}
	return n.Tx.Query(ctx, sql, args...)
}

func (n *nativeTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if n.err != nil {
		return errRow{n.err}
	}
	return n.Tx.QueryRow(ctx, sql, args...)
}

type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }
