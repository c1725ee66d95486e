package main

import (
	"context"
	"database/sql/driver"
)

// SQLite runs in the process, so there is no wire to count on. Its
// statements are counted by a connector that wraps the driver's: the
// *sql.DB still reports the modernc.org/sqlite driver (sqlite.New checks
// it), and the wrapped connection forwards every optional interface the
// driver's connections implement.

type countingConnector struct {
	driver.Connector
	stats *wireStats
}

func (c countingConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &countedConn{conn: conn, stats: c.stats}, nil
}

// liteConn is what modernc.org/sqlite's connections implement.
type liteConn interface {
	driver.Conn
	driver.ConnBeginTx
	driver.ConnPrepareContext
	driver.ExecerContext
	driver.QueryerContext
	driver.Pinger
	driver.SessionResetter
	driver.Validator
}

type countedConn struct {
	conn  driver.Conn
	stats *wireStats
}

func (c *countedConn) lite() liteConn { return c.conn.(liteConn) }

// Unwrap lets modernc.org/sqlite see the connection it opened.
func (c *countedConn) Unwrap() driver.Conn { return c.conn }

func (c *countedConn) Prepare(query string) (driver.Stmt, error) {
	return c.PrepareContext(context.Background(), query)
}

func (c *countedConn) Close() error { return c.conn.Close() }

func (c *countedConn) Begin() (driver.Tx, error) {
	return c.BeginTx(context.Background(), driver.TxOptions{})
}

func (c *countedConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	c.stats.statements.Add(1)
	tx, err := c.lite().BeginTx(ctx, opts)
	if err != nil {
		return nil, err
	}
	return countedTx{tx, c.stats}, nil
}

func (c *countedConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	c.stats.prepares.Add(1)
	s, err := c.lite().PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	return &countedStmt{s, c.stats}, nil
}

func (c *countedConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	c.stats.statements.Add(1)
	return c.lite().ExecContext(ctx, query, args)
}

func (c *countedConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	c.stats.statements.Add(1)
	return c.lite().QueryContext(ctx, query, args)
}

func (c *countedConn) Ping(ctx context.Context) error { return c.lite().Ping(ctx) }

func (c *countedConn) ResetSession(ctx context.Context) error { return c.lite().ResetSession(ctx) }

func (c *countedConn) IsValid() bool { return c.lite().IsValid() }

type countedTx struct {
	tx    driver.Tx
	stats *wireStats
}

func (t countedTx) Commit() error {
	t.stats.statements.Add(1)
	return t.tx.Commit()
}

func (t countedTx) Rollback() error {
	t.stats.statements.Add(1)
	return t.tx.Rollback()
}

type liteStmt interface {
	driver.Stmt
	driver.StmtExecContext
	driver.StmtQueryContext
}

type countedStmt struct {
	stmt  driver.Stmt
	stats *wireStats
}

func (s *countedStmt) Close() error  { return s.stmt.Close() }
func (s *countedStmt) NumInput() int { return s.stmt.NumInput() }

func (s *countedStmt) Exec(args []driver.Value) (driver.Result, error) {
	s.stats.statements.Add(1)
	return s.stmt.Exec(args) //nolint:staticcheck // required by driver.Stmt
}

func (s *countedStmt) Query(args []driver.Value) (driver.Rows, error) {
	s.stats.statements.Add(1)
	return s.stmt.Query(args) //nolint:staticcheck // required by driver.Stmt
}

func (s *countedStmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	s.stats.statements.Add(1)
	return s.stmt.(liteStmt).ExecContext(ctx, args)
}

func (s *countedStmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	s.stats.statements.Add(1)
	return s.stmt.(liteStmt).QueryContext(ctx, args)
}
