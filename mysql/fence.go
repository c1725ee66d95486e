package mysql

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"strings"
	"sync"

	mysqldriver "github.com/go-sql-driver/mysql"

	"github.com/idemkit/idem/dialect"
)

// fenceSession is the connection of its own, behind vtgate on a sharded
// keyspace, on which the token floor is read and raised outside the
// transactions that need it (fenceSession in dialect.go says why). New
// reserves it from the pool, so that it is there when every other
// connection is held by a transaction waiting for it: taking one from the
// pool then would wait forever. It runs one statement at a time; a query
// holds it until its rows are closed. A connection that breaks is replaced.
type fenceSession struct {
	db   *sql.DB
	mu   sync.Mutex
	conn *sql.Conn
}

var _ dialect.Queryer = (*fenceSession)(nil)

// newFenceSession reserves a connection of db, which must have more than
// one: the transactions need the others.
func newFenceSession(ctx context.Context, db *sql.DB) (*fenceSession, error) {
	if db.Stats().MaxOpenConnections == 1 {
		return nil, fmt.Errorf("mysql: %w: behind vtgate on a sharded keyspace idem keeps a connection of its own for the lease token floor "+
			"and purge; a pool of one connection (SetMaxOpenConns(1)) leaves none for the transactions", dialect.ErrInvalidConfig)
	}
	conn, err := db.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("mysql: reserve a connection for the token floor: %w", err)
	}
	return &fenceSession{db: db, conn: conn}, nil
}

// session returns the reserved connection, reserving a new one when the
// last broke. f.mu is held.
func (f *fenceSession) session(ctx context.Context) (dialect.Queryer, error) {
	if f.conn == nil {
		conn, err := f.db.Conn(ctx)
		if err != nil {
			return nil, err
		}
		f.conn = conn
	}
	return dialect.NewSQLQueryer(f.conn)
}

// dropIfBroken closes the connection when err says it broke. f.mu is held.
func (f *fenceSession) dropIfBroken(err error) {
	if errors.Is(err, driver.ErrBadConn) || errors.Is(err, mysqldriver.ErrInvalidConn) || dialect.ConnectionLost(err) {
		_ = f.conn.Close()
		f.conn = nil
	}
}

// Exec runs a statement on the reserved connection.
func (f *fenceSession) Exec(ctx context.Context, query string, args ...any) (int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, err := f.session(ctx)
	if err != nil {
		return 0, err
	}
	n, err := s.Exec(ctx, query, args...)
	f.dropIfBroken(err)
	return n, err
}

// Query runs a query on the reserved connection, which stays the caller's
// until the rows are closed.
func (f *fenceSession) Query(ctx context.Context, query string, args ...any) (dialect.Rows, error) {
	f.mu.Lock()
	s, err := f.session(ctx)
	if err != nil {
		f.mu.Unlock()
		return nil, err
	}
	rows, err := s.Query(ctx, query, args...)
	if err != nil {
		f.dropIfBroken(err)
		f.mu.Unlock()
		return nil, err
	}
	return &fenceRows{Rows: rows, f: f}, nil
}

// close gives the reserved connection back to the pool.
func (f *fenceSession) close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.conn == nil {
		return nil
	}
	err := f.conn.Close()
	f.conn = nil
	return err
}

// fenceRows gives the reserved connection back when closed.
type fenceRows struct {
	dialect.Rows
	f    *fenceSession
	once sync.Once
}

func (r *fenceRows) Close() error {
	err := r.Rows.Close()
	r.once.Do(r.f.mu.Unlock)
	return err
}

// uncached makes a read vttablet runs on its own, never sharing the result
// of an identical read already in flight (its query consolidator), which
// may have begun before the floor was raised.
func uncached(query string) string {
	return strings.Replace(query, "SELECT ", "SELECT /*vt+ CONSOLIDATOR=disabled */ ", 1)
}
