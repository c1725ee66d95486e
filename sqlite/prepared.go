package sqlite

import (
	"context"
	"database/sql"
	"sync"

	"github.com/idemkit/idem/dialect"
)

// modernc.org/sqlite compiles every statement it is given without arguments
// prepared (sqlite3_prepare_v2), runs it once and finalizes it. The
// dialect's statements run on every request, so the driver keeps them
// prepared: one *sql.Stmt per statement, which database/sql prepares once on
// each connection and reuses inside transactions (Tx.StmtContext). The
// driver's transactions and pool are dialect.Preparers.
//
// A statement is prepared on the pool, never while the caller holds a
// connection: with a pool of one connection, preparing there would wait for
// the very connection the caller holds. So the first time a transaction
// needs a statement it runs unprepared and is noted; the next Begin, before
// it takes its connection, prepares what was noted.

// stmtCache holds the dialect's prepared statements for one database.
type stmtCache struct {
	db     *sql.DB
	mu     sync.Mutex
	stmts  map[string]*sql.Stmt
	wanted map[string]bool
}

func newStmtCache(db *sql.DB) *stmtCache {
	return &stmtCache{db: db, stmts: map[string]*sql.Stmt{}, wanted: map[string]bool{}}
}

// get returns the prepared statement for query, or nil (noting it for the
// next prepareWanted) when it is not prepared yet.
func (c *stmtCache) get(query string) *sql.Stmt {
	c.mu.Lock()
	defer c.mu.Unlock()
	if s := c.stmts[query]; s != nil {
		return s
	}
	c.wanted[query] = true
	return nil
}

// prepareWanted prepares the statements get was asked for.
func (c *stmtCache) prepareWanted(ctx context.Context) {
	c.mu.Lock()
	if len(c.wanted) == 0 {
		c.mu.Unlock()
		return
	}
	queries := make([]string, 0, len(c.wanted))
	for q := range c.wanted {
		queries = append(queries, q)
	}
	c.mu.Unlock()
	for _, q := range queries {
		s, err := c.db.PrepareContext(ctx, q)
		c.mu.Lock()
		if err != nil {
			// Not now (its table may be gone); a later get notes it again.
			delete(c.wanted, q)
			c.mu.Unlock()
			continue
		}
		if c.stmts[q] == nil {
			c.stmts[q], s = s, nil
		}
		delete(c.wanted, q)
		c.mu.Unlock()
		if s != nil {
			s.Close() // another Begin prepared it first
		}
	}
}

// txPreparer runs statements in one transaction, a dialect's own through
// prepared statements.
type txPreparer struct {
	dialect.Queryer
	tx    *sql.Tx
	cache *stmtCache
}

var _ dialect.Preparer = txPreparer{}

// ExecPrepared runs query prepared when it already is, else as it is.
func (q txPreparer) ExecPrepared(ctx context.Context, query string, args ...any) (int64, error) {
	s := q.cache.get(query)
	if s == nil {
		return q.Exec(ctx, query, args...)
	}
	res, err := q.tx.StmtContext(ctx, s).ExecContext(ctx, args...)
	if err != nil {
		return 0, dialect.SQLTxDone(err)
	}
	return res.RowsAffected()
}

// QueryPrepared runs query prepared when it already is, else as it is.
func (q txPreparer) QueryPrepared(ctx context.Context, query string, args ...any) (dialect.Rows, error) {
	s := q.cache.get(query)
	if s == nil {
		return q.Query(ctx, query, args...)
	}
	rows, err := q.tx.StmtContext(ctx, s).QueryContext(ctx, args...)
	if err != nil {
		return nil, dialect.SQLTxDone(err)
	}
	return rows, nil
}

// poolPreparer runs statements on the pool, a dialect's own (lookups)
// through prepared statements. No connection is held here, so a statement
// noted as wanted is prepared on the spot: with Config.ReadFirst, replays
// run only lookups and never reach a Begin.
type poolPreparer struct {
	dialect.Queryer
	cache *stmtCache
}

var _ dialect.Preparer = poolPreparer{}

func (q poolPreparer) prepared(ctx context.Context, query string) *sql.Stmt {
	if s := q.cache.get(query); s != nil {
		return s
	}
	q.cache.prepareWanted(ctx)
	return q.cache.get(query)
}

// ExecPrepared runs query prepared.
func (q poolPreparer) ExecPrepared(ctx context.Context, query string, args ...any) (int64, error) {
	s := q.prepared(ctx, query)
	if s == nil {
		return q.Exec(ctx, query, args...)
	}
	res, err := s.ExecContext(ctx, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// QueryPrepared runs query prepared.
func (q poolPreparer) QueryPrepared(ctx context.Context, query string, args ...any) (dialect.Rows, error) {
	s := q.prepared(ctx, query)
	if s == nil {
		return q.Query(ctx, query, args...)
	}
	return s.QueryContext(ctx, args...)
}
