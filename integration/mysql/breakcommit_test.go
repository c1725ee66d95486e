package mysql_test

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"

	mysqldriver "github.com/go-sql-driver/mysql"

	"github.com/idemkit/idem/conformance"
	"github.com/idemkit/idem/integration/containers"
	"github.com/idemkit/idem/mysql"
)

// comCommit is the COMMIT go-sql-driver sends: a COM_QUERY packet (0x03)
// whose text is COMMIT.
var comCommit = []byte("\x03COMMIT")

// commitCutter closes a connection right after the next COMMIT was written
// on it, once armed: the server may or may not commit, the client cannot
// know.
type commitCutter struct {
	armed atomic.Bool
	cuts  atomic.Int32
}

type cutConn struct {
	net.Conn
	c *commitCutter
}

func (c *cutConn) Write(b []byte) (int, error) {
	if bytes.Contains(b, comCommit) && c.c.armed.CompareAndSwap(true, false) {
		n, err := c.Conn.Write(b)
		c.c.cuts.Add(1)
		c.Conn.Close()
		return n, err
	}
	return c.Conn.Write(b)
}

// dialers numbers the networks registered with go-sql-driver, one per
// commitBreaker.
var dialers atomic.Int64

// commitBreaker is a conformance.CommitBreaker on a pool of its own, with
// the DSN parameters params: its connections dial through a commitCutter.
func commitBreaker(t *testing.T, params string, opts mysql.Options) conformance.CommitBreaker[*sql.Tx] {
	t.Helper()
	dsn := containers.MySQL(t)
	if !strings.Contains(dsn, "@tcp(") {
		t.Fatalf("DSN %q does not dial tcp(...): cannot put a cutter in front of it", dsn)
	}
	cut := &commitCutter{}
	network := fmt.Sprintf("idemcut%d", dialers.Add(1))
	mysqldriver.RegisterDialContext(network, func(ctx context.Context, addr string) (net.Conn, error) {
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, err
		}
		return &cutConn{Conn: c, c: cut}, nil
	})
	db, err := sql.Open("mysql", strings.Replace(dsn, "@tcp(", "@"+network+"(", 1)+"?"+params)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	d, err := mysql.New(t.Context(), db, opts)
	if err != nil {
		t.Fatal(err)
	}
	return conformance.CommitBreaker[*sql.Tx]{
		Driver: d,
		Arm:    func() { cut.armed.Store(true) },
		Broken: func() int { return int(cut.cuts.Load()) },
	}
}

// beginReadOnly begins a read-only transaction on the pool with params.
func beginReadOnly(t *testing.T, params string) *sql.Tx {
	return conformance.BeginReadOnlySQL(t, open(t, params), "")
}
