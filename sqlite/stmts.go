package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/dialect"
)

// modernc.org/sqlite compiles every statement it is given without arguments
// prepared (sqlite3_prepare_v2), runs it once and finalizes it. The
// dialect's statements run on every request, so the driver keeps them
// prepared: one *sql.Stmt per statement, which database/sql prepares once on
// each connection and reuses inside transactions (Tx.StmtContext).
//
// A statement is prepared on the pool in the background the first time it
// is needed, never while the caller holds a connection: with a pool of one
// connection, preparing there would wait for the very connection the caller
// holds. Until it is ready, the statement runs unprepared.

// stmtCache holds the dialect's prepared statements for one database.
type stmtCache struct {
	db *sql.DB
	m  sync.Map // query -> *cachedStmt
}

type cachedStmt struct{ stmt atomic.Pointer[sql.Stmt] }

// prepareTimeout bounds a background preparation.
const prepareTimeout = 30 * time.Second

// get returns the prepared statement for query, or nil (and starts
// preparing it) when it is not ready.
func (c *stmtCache) get(query string) *sql.Stmt {
	v, loaded := c.m.LoadOrStore(query, &cachedStmt{})
	cs := v.(*cachedStmt)
	if s := cs.stmt.Load(); s != nil {
		return s
	}
	if !loaded {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), prepareTimeout)
			defer cancel()
			s, err := c.db.PrepareContext(ctx, query)
			if err != nil {
				// Unusable now (the table may not exist yet): a later
				// request tries again.
				c.m.Delete(query)
				return
			}
			cs.stmt.Store(s)
		}()
	}
	return nil
}

// txQueryer runs statements in a transaction of this driver, the dialect's
// own through prepared statements.
type txQueryer struct {
	idem.Tx
	tx    *sql.Tx
	cache *stmtCache
}

// preparer is what the dialect looks for to run its statements prepared.
type preparer interface {
	execPrepared(ctx context.Context, query string, args ...any) (int64, error)
	queryPrepared(ctx context.Context, query string, args ...any) (dialect.Rows, error)
}

var _ preparer = txQueryer{}

func (q txQueryer) execPrepared(ctx context.Context, query string, args ...any) (int64, error) {
	s := q.cache.get(query)
	if s == nil {
		return q.Exec(ctx, query, args...)
	}
	res, err := q.tx.StmtContext(ctx, s).ExecContext(ctx, args...)
	if err != nil {
		return 0, txDone(err)
	}
	return res.RowsAffected()
}

func (q txQueryer) queryPrepared(ctx context.Context, query string, args ...any) (dialect.Rows, error) {
	s := q.cache.get(query)
	if s == nil {
		return q.Query(ctx, query, args...)
	}
	rows, err := q.tx.StmtContext(ctx, s).QueryContext(ctx, args...)
	if err != nil {
		return nil, txDone(err)
	}
	return rows, nil
}

// txDone marks database/sql's finished-transaction error with its meaning.
func txDone(err error) error {
	if errors.Is(err, sql.ErrTxDone) {
		return dialect.Classified(dialect.ErrTxDone, err)
	}
	return err
}

// txn is the transaction Driver.Begin returns.
type txn struct {
	*idem.SQLTxn
	q txQueryer
}

var _ dialect.Txn[*sql.Tx] = txn{}

func (t txn) execPrepared(ctx context.Context, query string, args ...any) (int64, error) {
	return t.q.execPrepared(ctx, query, args...)
}

func (t txn) queryPrepared(ctx context.Context, query string, args ...any) (dialect.Rows, error) {
	return t.q.queryPrepared(ctx, query, args...)
}

// exec runs one of the dialect's statements, prepared when q can.
func exec(ctx context.Context, q dialect.Queryer, query string, args ...any) (int64, error) {
	if p, ok := q.(preparer); ok {
		return p.execPrepared(ctx, query, args...)
	}
	return q.Exec(ctx, query, args...)
}

// query runs one of the dialect's queries, prepared when q can.
func query(ctx context.Context, q dialect.Queryer, query string, args ...any) (dialect.Rows, error) {
	if p, ok := q.(preparer); ok {
		return p.queryPrepared(ctx, query, args...)
	}
	return q.Query(ctx, query, args...)
}
