package commitcut

import (
	"context"
	"database/sql"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"

	mysqldriver "github.com/go-sql-driver/mysql"

	"github.com/idemkit/idem/conformance"
	"github.com/idemkit/idem/mysql"
)

// mysqlCommit is the COMMIT go-sql-driver sends: a COM_QUERY packet (0x03)
// whose text is COMMIT.
var mysqlCommit = []byte("\x03COMMIT")

// mysqlNetworks numbers the networks registered with go-sql-driver, one
// per MySQLBreaker.
var mysqlNetworks atomic.Int64

// MySQLBreaker is a conformance.CommitBreaker on a pool of its own on dsn,
// a go-sql-driver DSN that dials tcp(…), with a mysql.Driver made with
// opts: the next COMMIT sent after Arm loses its answer (the connection
// closes once the COMMIT left). The pool and the driver close when t ends.
func MySQLBreaker(t *testing.T, dsn string, opts mysql.Options) conformance.CommitBreaker[*sql.Tx] {
	t.Helper()
	if !strings.Contains(dsn, "@tcp(") {
		t.Fatalf("DSN %q does not dial tcp(...): cannot put a cutter in front of it", dsn)
	}
	cut := &Cutter{}
	network := fmt.Sprintf("idemcut%d", mysqlNetworks.Add(1))
	mysqldriver.RegisterDialContext(network, func(ctx context.Context, addr string) (net.Conn, error) {
		var d net.Dialer
		c, err := d.DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, err
		}
		return &cutConn{Conn: c, c: cut, commit: mysqlCommit}, nil
	})
	db, err := sql.Open("mysql", strings.Replace(dsn, "@tcp(", "@"+network+"(", 1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	d, err := mysql.New(t.Context(), db, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := d.Close(); err != nil {
			t.Errorf("close the breaking driver: %v", err)
		}
	})
	return conformance.CommitBreaker[*sql.Tx]{
		Driver: d,
		Arm:    func() { cut.Armed.Store(true) },
		Broken: func() int { return int(cut.Cuts.Load()) },
	}
}
