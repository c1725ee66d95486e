// Package commitcut breaks a PostgreSQL or MySQL connection right after a
// COMMIT left it, for the tests of what a lost COMMIT does: the server may
// or may not commit, the client cannot know. It works on the client's side
// of the wire, so it serves any server, pooler or proxy a DSN names.
package commitcut

import (
	"bytes"
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem/conformance"
	"github.com/idemkit/idem/dialect"
)

// commitMsg is the text of the COMMIT statement on the wire, NUL-terminated
// as in a simple Query or a Parse message. Pool runs in
// pgx.QueryExecModeExec, so the COMMIT's Parse travels in the same write as
// its Execute: cutting that write cuts after COMMIT left.
var commitMsg = []byte("commit\x00")

// Cutter breaks the connection right after the next COMMIT is sent, once
// armed.
type Cutter struct {
	// Armed makes the next COMMIT sent break its connection; it disarms.
	Armed atomic.Bool
	// WriteFails makes the Write that carried COMMIT report an error;
	// otherwise the Write succeeds and the answer never arrives.
	WriteFails atomic.Bool
	// Stall keeps the connection open but swallows every byte the server
	// sends after COMMIT, until the client gives up on its own.
	Stall atomic.Bool
	// Cuts counts the connections broken so far.
	Cuts atomic.Int32
}

type cutConn struct {
	net.Conn
	c       *Cutter
	commit  []byte // the COMMIT on this protocol's wire
	stalled atomic.Bool
}

func (c *cutConn) Read(b []byte) (int, error) {
	for c.stalled.Load() {
		if _, err := c.Conn.Read(b); err != nil {
			return 0, err // the client's deadline, or the close that follows
		}
	}
	return c.Conn.Read(b)
}

// ErrReset is what a Write that carried COMMIT reports under WriteFails.
var ErrReset = errors.New("commitcut: connection reset after the bytes left")

func (c *cutConn) Write(b []byte) (int, error) {
	if bytes.Contains(b, c.commit) && c.c.Armed.CompareAndSwap(true, false) {
		n, err := c.Conn.Write(b)
		c.c.Cuts.Add(1)
		if c.c.Stall.Load() {
			c.stalled.Store(true)
			return n, err
		}
		_ = c.Conn.Close()
		if err == nil && c.c.WriteFails.Load() {
			err = ErrReset
		}
		return n, err
	}
	return c.Conn.Write(b)
}

// Pool returns a pool on dsn whose connections go through cut, in pgx's
// exec mode (unnamed statements), closed when tb ends.
func Pool(ctx context.Context, tb testing.TB, dsn string, cut *Cutter, maxConns int32) *pgxpool.Pool {
	tb.Helper()
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		tb.Fatal(err)
	}
	var dialer net.Dialer
	cfg.ConnConfig.TLSConfig = nil // the cutter reads the plain protocol
	cfg.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dialer.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &cutConn{Conn: c, c: cut, commit: commitMsg}, nil
	}
	cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeExec
	cfg.MaxConns = maxConns
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(pool.Close)
	return pool
}

// Breaker is a conformance.CommitBreaker on a pool of its own on dsn: the
// next COMMIT sent after Arm loses its answer (the connection closes once
// the COMMIT left).
func Breaker[TTx any](t *testing.T, dsn string, driver func(*pgxpool.Pool) (dialect.Driver[TTx], error)) conformance.CommitBreaker[TTx] {
	t.Helper()
	cut := &Cutter{}
	d, err := driver(Pool(t.Context(), t, dsn, cut, 4))
	if err != nil {
		t.Fatal(err)
	}
	return conformance.CommitBreaker[TTx]{
		Driver: d,
		Arm:    func() { cut.Armed.Store(true) },
		Broken: func() int { return int(cut.Cuts.Load()) },
	}
}
