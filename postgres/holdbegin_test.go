package postgres

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"io"
	"reflect"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/idemkit/idem/dialect"
)

// TestHoldBeginKeepsMethods: the wrapped connection and prepared statement
// have every method of pgx's, with the same signature, so that whatever
// database/sql or a caller's Raw finds on a *stdlib.Conn (an optional
// driver interface, Conn() *pgx.Conn) it finds on them too. It reflects on
// stdlib's types, so a method pgx adds fails it until the wrapper has it.
func TestHoldBeginKeepsMethods(t *testing.T) {
	for _, tc := range []struct{ inner, outer reflect.Type }{
		{reflect.TypeFor[*stdlib.Conn](), reflect.TypeFor[*holdConn]()},
		{reflect.TypeFor[*stdlib.Stmt](), reflect.TypeFor[holdStmt]()},
	} {
		if tc.inner.NumMethod() == 0 {
			t.Fatalf("%v has no methods", tc.inner)
		}
		for i := range tc.inner.NumMethod() {
			want := tc.inner.Method(i)
			got, ok := tc.outer.MethodByName(want.Name)
			if !ok {
				t.Errorf("%v lacks %v's method %s", tc.outer, tc.inner, want.Name)
				continue
			}
			// Compare without the receiver.
			wt, gt := want.Type, got.Type
			same := wt.NumIn() == gt.NumIn() && wt.NumOut() == gt.NumOut() && wt.IsVariadic() == gt.IsVariadic()
			for j := 1; same && j < wt.NumIn(); j++ {
				same = wt.In(j) == gt.In(j)
			}
			for j := 0; same && j < wt.NumOut(); j++ {
				same = wt.Out(j) == gt.Out(j)
			}
			if !same {
				t.Errorf("%v.%s is %v, %v's is %v", tc.outer, want.Name, gt, tc.inner, wt)
			}
		}
	}
}

// TestHoldBeginInterfaces: the optional interfaces database/sql looks for,
// each implemented by the wrapper exactly when by pgx's type. (database/sql
// keeps a connection after a rollback on a cancelled context only when it
// is a SessionResetter and a Validator; *stdlib.Conn is no Validator, so
// adding one would change that.)
func TestHoldBeginInterfaces(t *testing.T) {
	conns := []reflect.Type{
		reflect.TypeFor[driver.Conn](), reflect.TypeFor[driver.ConnBeginTx](),
		reflect.TypeFor[driver.ConnPrepareContext](), reflect.TypeFor[driver.ExecerContext](),
		reflect.TypeFor[driver.QueryerContext](), reflect.TypeFor[driver.Execer](), //nolint:staticcheck // checked on purpose
		reflect.TypeFor[driver.Queryer](), //nolint:staticcheck // checked on purpose
		reflect.TypeFor[driver.SessionResetter](), reflect.TypeFor[driver.Validator](),
		reflect.TypeFor[driver.NamedValueChecker](), reflect.TypeFor[driver.Pinger](),
		reflect.TypeFor[driver.ColumnConverter](), //nolint:staticcheck // checked on purpose
		reflect.TypeFor[io.Closer](), reflect.TypeFor[interface{ Conn() *pgx.Conn }](),
	}
	stmts := []reflect.Type{
		reflect.TypeFor[driver.Stmt](), reflect.TypeFor[driver.StmtExecContext](),
		reflect.TypeFor[driver.StmtQueryContext](), reflect.TypeFor[driver.NamedValueChecker](),
		reflect.TypeFor[driver.ColumnConverter](), //nolint:staticcheck // checked on purpose
	}
	for _, tc := range []struct {
		inner, outer reflect.Type
		ifaces       []reflect.Type
	}{
		{reflect.TypeFor[*stdlib.Conn](), reflect.TypeFor[*holdConn](), conns},
		{reflect.TypeFor[*stdlib.Stmt](), reflect.TypeFor[holdStmt](), stmts},
	} {
		for _, i := range tc.ifaces {
			if in, out := tc.inner.Implements(i), tc.outer.Implements(i); in != out {
				t.Errorf("%v implements %v: %v; %v: %v", tc.inner, i, in, tc.outer, out)
			}
		}
	}
	if !reflect.TypeFor[holdConnector]().Implements(reflect.TypeFor[driver.Connector]()) {
		t.Error("HoldBegin's connector is no driver.Connector")
	}
}

// fakeConn is a driver connection that is not pgx's.
type fakeConn struct {
	driver.Conn
	closed bool
}

func (c *fakeConn) Close() error { c.closed = true; return nil }

type fakeConnector struct {
	conn   driver.Conn
	err    error
	closed *bool
}

func (c fakeConnector) Connect(context.Context) (driver.Conn, error) { return c.conn, c.err }
func (c fakeConnector) Driver() driver.Driver                        { return stdlib.GetDefaultDriver() }
func (c fakeConnector) Close() error                                 { *c.closed = true; return nil }

// TestHoldBeginConnect: Connect refuses, clearly, a connector whose
// connections are not pgx's (closing the one it got), and passes a connect
// error through; Driver and Close are the inner connector's.
func TestHoldBeginConnect(t *testing.T) {
	errDial := errors.New("dial failed")
	for _, tc := range []struct {
		name    string
		inner   driver.Connector
		want    error
		wantMsg string
	}{
		{name: "nil connector", want: dialect.ErrInvalidConfig, wantMsg: "postgres: HoldBegin: invalid config: nil driver.Connector"},
		{name: "not pgx", inner: fakeConnector{conn: &fakeConn{}, closed: new(bool)}, want: dialect.ErrInvalidConfig,
			wantMsg: "postgres: HoldBegin: invalid config: the connector's connection is a *postgres.fakeConn, not pgx's *stdlib.Conn"},
		{name: "connect fails", inner: fakeConnector{err: errDial, closed: new(bool)}, want: errDial, wantMsg: "dial failed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := HoldBegin(tc.inner)
			conn, err := c.Connect(t.Context())
			if conn != nil || !errors.Is(err, tc.want) || err.Error() != tc.wantMsg {
				t.Fatalf("Connect = %v, %v; want nil, %q", conn, err, tc.wantMsg)
			}
			if f, ok := tc.inner.(fakeConnector); ok {
				if fc, ok := f.conn.(*fakeConn); ok && !fc.closed {
					t.Error("the refused connection was not closed")
				}
			}
			if _, ok := c.Driver().(*stdlib.Driver); !ok {
				t.Errorf("Driver is a %T, not pgx's", c.Driver())
			}
		})
	}
	closed := false
	if err := HoldBegin(fakeConnector{closed: &closed}).(io.Closer).Close(); err != nil || !closed {
		t.Errorf("Close = %v, inner closed %v", err, closed)
	}
	// NewSQL accepts the *sql.DB: its driver is pgx's.
	db := sql.OpenDB(HoldBegin(stdlib.GetConnector(pgx.ConnConfig{})))
	defer db.Close()
	if err := dialect.CheckSQLDB[*stdlib.Driver]("postgres", db, ""); err != nil {
		t.Error(err)
	}
}

// TestHoldBeginTxOptions: BeginTx maps levels and read-only as pgx's
// stdlib does, and refuses (at BeginTx, not later) what it refuses.
func TestHoldBeginTxOptions(t *testing.T) {
	for _, tc := range []struct {
		level    sql.IsolationLevel
		readOnly bool
		want     pgx.TxOptions
		fails    bool
	}{
		{level: sql.LevelDefault},
		{level: sql.LevelReadUncommitted, want: pgx.TxOptions{IsoLevel: pgx.ReadUncommitted}},
		{level: sql.LevelReadCommitted, want: pgx.TxOptions{IsoLevel: pgx.ReadCommitted}},
		{level: sql.LevelRepeatableRead, want: pgx.TxOptions{IsoLevel: pgx.RepeatableRead}},
		{level: sql.LevelSnapshot, want: pgx.TxOptions{IsoLevel: pgx.RepeatableRead}},
		{level: sql.LevelSerializable, readOnly: true, want: pgx.TxOptions{IsoLevel: pgx.Serializable, AccessMode: pgx.ReadOnly}},
		{level: sql.LevelWriteCommitted, fails: true},
		{level: sql.LevelLinearizable, fails: true},
	} {
		t.Run(tc.level.String(), func(t *testing.T) {
			got, err := txOptions(driver.TxOptions{Isolation: driver.IsolationLevel(tc.level), ReadOnly: tc.readOnly})
			if (err != nil) != tc.fails || (!tc.fails && got != tc.want) {
				t.Errorf("txOptions = %+v, %v; want %+v, fails %v", got, err, tc.want, tc.fails)
			}
		})
	}
}
