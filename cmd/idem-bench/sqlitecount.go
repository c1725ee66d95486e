package main

import (
	"context"
	"database/sql/driver"
)

// SQLite runs in the process, so there is no wire to count on. Its
// statements are counted by a connector that wraps the driver's: the
// *sql.DB still reports the modernc.org/sqlite driver (sqlite.New checks
// it). The wrapped connection embeds the driver's, so it forwards what the
// driver's connections implement, and counts what database/sql calls on
// its fast paths (BeginTx, PrepareContext, ExecContext, QueryContext).

type countingConnector struct {
	driver.Connector
	stats *wireStats
}

// liteConn is what database/sql needs of modernc.org/sqlite's connections
// to run statements without preparing each and to pool them.
type liteConn interface {
	driver.Conn
	driver.ConnBeginTx
	driver.ConnPrepareContext
	driver.ExecerContext
	driver.QueryerContext
	driver.SessionResetter
	driver.Validator
}

func (c countingConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &countedConn{liteConn: conn.(liteConn), stats: c.stats}, nil
}

type countedConn struct {
	liteConn
	stats *wireStats
}

func (c *countedConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	c.stats.statements.Add(1)
	tx, err := c.liteConn.BeginTx(ctx, opts)
	if err != nil {
		return nil, err
	}
	return countedTx{tx, c.stats}, nil
}

func (c *countedConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	c.stats.prepares.Add(1)
	s, err := c.liteConn.PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	return &countedStmt{s.(liteStmt), c.stats}, nil
}

func (c *countedConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	c.stats.statements.Add(1)
	return c.liteConn.ExecContext(ctx, query, args)
}

func (c *countedConn) QueryContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	c.stats.statements.Add(1)
	return c.liteConn.QueryContext(ctx, query, args)
}

// countedTx counts COMMIT and ROLLBACK.
type countedTx struct {
	driver.Tx
	stats *wireStats
}

func (t countedTx) Commit() error {
	t.stats.statements.Add(1)
	return t.Tx.Commit()
}

func (t countedTx) Rollback() error {
	t.stats.statements.Add(1)
	return t.Tx.Rollback()
}

type liteStmt interface {
	driver.Stmt
	driver.StmtExecContext
	driver.StmtQueryContext
}

// countedStmt counts the runs of a prepared statement (database/sql calls
// the context forms when they exist).
type countedStmt struct {
	liteStmt
	stats *wireStats
}

func (s *countedStmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	s.stats.statements.Add(1)
	return s.liteStmt.ExecContext(ctx, args)
}

func (s *countedStmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	s.stats.statements.Add(1)
	return s.liteStmt.QueryContext(ctx, args)
}
