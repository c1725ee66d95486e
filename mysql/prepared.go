package mysql

import (
	"context"
	"database/sql"
	"sync"

	"github.com/idemkit/idem/dialect"
)

// poolQueryer runs statements outside any transaction. It is a
// dialect.Preparer: the dialect's own queries there (lookups, which
// Config.ReadFirst runs for every request) go as server-side prepared
// statements: prepared once per connection by
// database/sql, then one round trip each (COM_STMT_EXECUTE) that the server
// need not parse again, which inlined text cannot avoid. Inside
// transactions statements stay inlined: a transaction's connection is not
// known in advance, so a prepare there would cost its round trips on every
// new connection a transaction lands on, and sql.Tx.StmtContext re-prepares
// whenever the connection differs.
type poolQueryer struct {
	dialect.Queryer
	db *sql.DB

	mu    sync.Mutex
	stmts map[string]*sql.Stmt
}

func newPoolQueryer(db *sql.DB) (*poolQueryer, error) {
	q, err := dialect.NewSQLQueryer(db)
	if err != nil {
		return nil, err
	}
	return &poolQueryer{Queryer: q, db: db, stmts: map[string]*sql.Stmt{}}, nil
}

var _ dialect.Preparer = (*poolQueryer)(nil)

// ExecPrepared runs a statement as a prepared statement.
func (p *poolQueryer) ExecPrepared(ctx context.Context, query string, args ...any) (int64, error) {
	s, err := p.prepared(ctx, query)
	if err != nil {
		return 0, err
	}
	res, err := s.ExecContext(ctx, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// QueryPrepared runs one of the dialect's queries as a prepared statement.
func (p *poolQueryer) QueryPrepared(ctx context.Context, query string, args ...any) (dialect.Rows, error) {
	s, err := p.prepared(ctx, query)
	if err != nil {
		return nil, err
	}
	return s.QueryContext(ctx, args...)
}

func (p *poolQueryer) prepared(ctx context.Context, query string) (*sql.Stmt, error) {
	p.mu.Lock()
	s := p.stmts[query]
	p.mu.Unlock()
	if s != nil {
		return s, nil
	}
	s, err := p.db.PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if prev := p.stmts[query]; prev != nil {
		s.Close() // another goroutine prepared it first
		return prev, nil
	}
	p.stmts[query] = s
	return s, nil
}
