package dialect

import "context"

// Optional abilities. A Queryer or Tx may implement any of the interfaces
// below; a Dialect reaches them only through the functions beside them
// (Pipeline, ExecPrepared, QueryPrepared, DeferToCommit), which fall back to
// plain statements when the ability is missing. The result is the same
// either way, only the cost differs. A wrapper around a transaction (a
// tracer, a fault injector) keeps an ability by implementing its interface
// with the same function over what it wraps:
//
//	func (t tracedTx) Pipeline(ctx context.Context, stmts ...dialect.Statement) error {
//		return dialect.Pipeline(ctx, t.Tx, stmts...)
//	}
//
// and loses it, knowingly, by not implementing it.

// Statement is one statement of a pipeline or of a deferred completion,
// with what to do with its result.
type Statement struct {
	// SQL and Args are the statement and its arguments.
	SQL  string
	Args []any
	// Rows, when set, reads the statement's rows; it need not read them
	// all. The rows are closed afterwards.
	Rows func(Rows) error
	// Affected, when set (and Rows is not), gets the number of rows the
	// statement changed.
	Affected func(int64) error
}

// Pipeliner is a Queryer that sends several statements in one round trip
// (pgx's pipeline mode). They run in order and stop at the first error,
// exactly as they would one after the other.
//
// Fallback: Pipeline runs them one by one.
type Pipeliner interface {
	Pipeline(ctx context.Context, stmts ...Statement) error
}

// Pipeline runs stmts on q, in one round trip when q is a Pipeliner, else
// one by one; either way in order, stopping at the first error.
func Pipeline(ctx context.Context, q Queryer, stmts ...Statement) error {
	if p, ok := q.(Pipeliner); ok {
		return p.Pipeline(ctx, stmts...)
	}
	for _, s := range stmts {
		if err := Run(ctx, q, s); err != nil {
			return err
		}
	}
	return nil
}

// Run runs one statement on q and hands its result to s.Rows or
// s.Affected.
func Run(ctx context.Context, q Queryer, s Statement) error {
	if s.Rows == nil {
		n, err := q.Exec(ctx, s.SQL, s.Args...)
		if err == nil && s.Affected != nil {
			err = s.Affected(n)
		}
		return err
	}
	rows, err := q.Query(ctx, s.SQL, s.Args...)
	if err != nil {
		return err
	}
	if err := s.Rows(rows); err != nil {
		rows.Close()
		return err
	}
	return CloseRows(rows)
}

// CloseRows closes rows after reading and returns the error that ended the
// iteration, if there was one, else Close's.
func CloseRows(rows Rows) error {
	if err := rows.Err(); err != nil {
		rows.Close()
		return err
	}
	return rows.Close()
}

// Preparer is a Queryer that keeps statements prepared: a dialect's own
// statements repeat on every request, and a driver that would otherwise
// parse each one again (modernc.org/sqlite compiles every unprepared
// statement) saves that work.
//
// Fallback: ExecPrepared and QueryPrepared run the statement unprepared.
type Preparer interface {
	ExecPrepared(ctx context.Context, query string, args ...any) (int64, error)
	QueryPrepared(ctx context.Context, query string, args ...any) (Rows, error)
}

// ExecPrepared runs query on q, prepared when q is a Preparer.
func ExecPrepared(ctx context.Context, q Queryer, query string, args ...any) (int64, error) {
	if p, ok := q.(Preparer); ok {
		return p.ExecPrepared(ctx, query, args...)
	}
	return q.Exec(ctx, query, args...)
}

// QueryPrepared runs query on q, prepared when q is a Preparer.
func QueryPrepared(ctx context.Context, q Queryer, query string, args ...any) (Rows, error) {
	if p, ok := q.(Preparer); ok {
		return p.QueryPrepared(ctx, query, args...)
	}
	return q.Query(ctx, query, args...)
}

// CommitDeferrer is a transaction that can hold a statement back and send
// it together with COMMIT, in one round trip. The statement must fail (not
// merely change nothing) when it does not do its work, because a pipeline
// stops at the first error: COMMIT is then never reached without it. The
// transaction's Commit reports that failure; a later statement in the
// transaction runs after the held one.
//
// Fallback: DeferToCommit reports false and the dialect runs the statement
// at once.
type CommitDeferrer interface {
	DeferToCommit(stmt Statement) bool
}

// DeferToCommit asks q to send stmt with its COMMIT. It reports false when
// q cannot (it is not a CommitDeferrer, or declines); the caller then runs
// the statement itself.
func DeferToCommit(q Queryer, stmt Statement) bool {
	d, ok := q.(CommitDeferrer)
	return ok && d.DeferToCommit(stmt)
}
