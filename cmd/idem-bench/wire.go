package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
)

// wireStats counts what the benchmark's own connections send, read off the
// wire: round trips (a write that follows a read starts one, so pipelined
// messages count once) and statements and prepares, decoded from the client
// half of the protocol.
type wireStats struct {
	roundTrips atomic.Int64
	statements atomic.Int64
	prepares   atomic.Int64
	// opaque is set when a connection's stream could not be decoded (TLS):
	// its round trips still count, its statements do not.
	opaque atomic.Bool
}

// counts is a snapshot of wireStats.
type counts struct {
	roundTrips, statements, prepares int64
	opaque                           bool
}

func (w *wireStats) snapshot() counts {
	if w == nil {
		return counts{}
	}
	return counts{w.roundTrips.Load(), w.statements.Load(), w.prepares.Load(), w.opaque.Load()}
}

func (c counts) sub(o counts) counts {
	return counts{c.roundTrips - o.roundTrips, c.statements - o.statements, c.prepares - o.prepares, c.opaque || o.opaque}
}

// protocol decodes the client's messages of one connection.
type protocol interface {
	// feed consumes bytes the client wrote and reports statements and
	// prepares that began in them.
	feed(p []byte, w *wireStats)
}

// dialLoopback dials addr only if it is a loopback address: the benchmark
// talks to nothing else.
func dialLoopback(ctx context.Context, network, addr string) (net.Conn, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	ips, err := net.DefaultResolver.LookupIPAddr(ctx, host)
	if err != nil {
		return nil, err
	}
	for _, ip := range ips {
		if !ip.IP.IsLoopback() {
			return nil, fmt.Errorf("idem-bench: refusing to dial %s: %s is not a loopback address", addr, ip.IP)
		}
	}
	var d net.Dialer
	return d.DialContext(ctx, network, addr)
}

// countingDialer returns a dial function whose connections count into w,
// decoding the client's stream with a fresh protocol from newProto. With a
// proxy (via), it dials the proxy instead of the server's address.
func countingDialer(w *wireStats, newProto func() protocol, via *delayProxy) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if via != nil {
			network, addr = "tcp", via.Addr()
		}
		c, err := dialLoopback(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		cc := &countingConn{Conn: c, stats: w, proto: newProto()}
		cc.readLast.Store(true)
		return cc, nil
	}
}

// countingConn is a net.Conn that counts into stats.
type countingConn struct {
	net.Conn
	stats *wireStats
	// readLast is true when the last traffic was a read, so the next write
	// starts a round trip. Drivers may read and write from two goroutines.
	readLast atomic.Bool
	mu       sync.Mutex // serializes proto
	proto    protocol
}

func (c *countingConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if n > 0 {
		c.readLast.Store(true)
	}
	return n, err
}

func (c *countingConn) Write(p []byte) (int, error) {
	if len(p) > 0 {
		if c.readLast.Swap(false) {
			c.stats.roundTrips.Add(1)
		}
		c.mu.Lock()
		c.proto.feed(p, c.stats)
		c.mu.Unlock()
	}
	return c.Conn.Write(p)
}

// SyscallConn keeps go-sql-driver's connection liveness check working: it
// peeks at the socket without reading, so it is not a round trip.
func (c *countingConn) SyscallConn() (syscall.RawConn, error) {
	if sc, ok := c.Conn.(syscall.Conn); ok {
		return sc.SyscallConn()
	}
	return nil, fmt.Errorf("idem-bench: %T has no SyscallConn", c.Conn)
}

// pgProtocol decodes PostgreSQL frontend messages: one Query ('Q') or
// Execute ('E') is a statement, one Parse ('P') a prepare. The startup
// message has no type byte; an SSLRequest makes the rest opaque.
type pgProtocol struct {
	started bool
	header  []byte // partial header
	skip    int    // body bytes left of the current message
	opaque  bool
}

func (p *pgProtocol) feed(b []byte, w *wireStats) {
	for len(b) > 0 && !p.opaque {
		if p.skip > 0 {
			n := min(p.skip, len(b))
			p.skip -= n
			b = b[n:]
			continue
		}
		need := 5
		if !p.started {
			need = 8 // length and protocol code
		}
		n := min(need-len(p.header), len(b))
		p.header = append(p.header, b[:n]...)
		b = b[n:]
		if len(p.header) < need {
			return
		}
		if !p.started {
			length := int(binary.BigEndian.Uint32(p.header[0:4]))
			code := binary.BigEndian.Uint32(p.header[4:8])
			if code == 80877103 || code == 80877104 { // SSLRequest, GSSENCRequest
				p.opaque = true
				w.opaque.Store(true)
				return
			}
			p.started = true
			p.skip = length - 8
			p.header = p.header[:0]
			continue
		}
		switch p.header[0] {
		case 'Q', 'E':
			w.statements.Add(1)
		case 'P':
			w.prepares.Add(1)
		}
		p.skip = int(binary.BigEndian.Uint32(p.header[1:5])) - 4
		p.header = p.header[:0]
	}
}

// mysqlProtocol decodes MySQL client packets: a packet with sequence id 0
// starts a command; COM_QUERY and COM_STMT_EXECUTE are statements,
// COM_STMT_PREPARE a prepare. The handshake response has sequence id 1 and
// is skipped like every continuation packet.
type mysqlProtocol struct {
	header []byte
	skip   int
	// command is true when the next payload byte is a command byte.
	command bool
}

const (
	comQuery       = 0x03
	comStmtPrepare = 0x16
	comStmtExecute = 0x17
)

func (p *mysqlProtocol) feed(b []byte, w *wireStats) {
	for len(b) > 0 {
		if p.command {
			switch b[0] {
			case comQuery, comStmtExecute:
				w.statements.Add(1)
			case comStmtPrepare:
				w.prepares.Add(1)
			}
			p.command = false
		}
		if p.skip > 0 {
			n := min(p.skip, len(b))
			p.skip -= n
			b = b[n:]
			continue
		}
		n := min(4-len(p.header), len(b))
		p.header = append(p.header, b[:n]...)
		b = b[n:]
		if len(p.header) < 4 {
			return
		}
		length := int(p.header[0]) | int(p.header[1])<<8 | int(p.header[2])<<16
		seq := p.header[3]
		p.header = p.header[:0]
		p.skip = length
		p.command = seq == 0 && length > 0
	}
}
