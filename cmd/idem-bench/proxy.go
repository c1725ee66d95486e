package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// delayProxy puts a network between the benchmark and a database on the
// same machine: it forwards TCP connections from a port of its own on
// 127.0.0.1 to a loopback upstream, holding every chunk of bytes for delay
// in each direction, so a round trip takes about 2×delay longer. Chunks keep
// their order and are delayed from when they arrived, not one after
// another, so a pipeline of messages is delayed once, as on a real link.
// It is bounded: at most maxConns client connections, at most 256 chunks queued
// per direction (then the sender waits, as TCP flow control makes it), and
// Close ends every connection.
type delayProxy struct {
	ln       net.Listener
	upstream string
	// delay is the delay each way, in nanoseconds (set while running, by
	// calibrate).
	delay    atomic.Int64
	maxConns int

	mu      sync.Mutex
	conns   map[net.Conn]struct{}
	clients int
	closed  bool
	wg      sync.WaitGroup
}

// startDelayProxy listens on 127.0.0.1 and forwards to upstream, which
// must be a loopback address.
func startDelayProxy(upstream string, delay time.Duration, maxConns int) (*delayProxy, error) {
	if delay < 0 || delay > time.Second {
		return nil, fmt.Errorf("delay proxy: delay %v out of 0..1s", delay)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &delayProxy{ln: ln, upstream: upstream, maxConns: maxConns, conns: map[net.Conn]struct{}{}}
	p.delay.Store(int64(delay))
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// Addr is the address clients dial.
func (p *delayProxy) Addr() string { return p.ln.Addr().String() }

func (p *delayProxy) String() string {
	return fmt.Sprintf("delaying proxy %s -> %s, +%v each way", p.Addr(), p.upstream, p.Delay())
}

// Delay is the delay each way.
func (p *delayProxy) Delay() time.Duration { return time.Duration(p.delay.Load()) }

// calibrate sets the delay so that a round trip measured by rtt (through
// the proxy) takes about want: it measures with no delay, sets half the
// difference each way, then corrects twice by what it measures. It
// returns the last measured round trip.
func (p *delayProxy) calibrate(want time.Duration, rtt func() (time.Duration, error)) (time.Duration, error) {
	p.delay.Store(0)
	got, err := rtt()
	if err != nil {
		return 0, err
	}
	d := max((want-got)/2, 0)
	for range 3 {
		p.delay.Store(int64(d))
		if got, err = rtt(); err != nil {
			return 0, err
		}
		d = max(d+(want-got)/2, 0)
	}
	return got, nil
}

// track registers c, refusing when the proxy is closed or, for a client,
// when maxConns clients are connected.
func (p *delayProxy) track(c net.Conn, client bool) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || client && p.clients >= p.maxConns {
		return false
	}
	p.conns[c] = struct{}{}
	if client {
		p.clients++
	}
	return true
}

func (p *delayProxy) untrack(c net.Conn, client bool) {
	p.mu.Lock()
	delete(p.conns, c)
	if client {
		p.clients--
	}
	p.mu.Unlock()
	_ = c.Close()
}

func (p *delayProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		if !p.track(c, true) {
			_ = c.Close()
			continue
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

func (p *delayProxy) serve(client net.Conn) {
	defer p.wg.Done()
	defer p.untrack(client, true)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	up, err := dialLoopback(ctx, "tcp", p.upstream)
	cancel()
	if err != nil {
		return
	}
	if !p.track(up, false) {
		_ = up.Close()
		return
	}
	defer p.untrack(up, false)
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.pipe(up, client)
	}()
	p.pipe(client, up)
	<-done
}

// pipe copies src to dst, each chunk held until delay after it arrived.
// When src ends it half-closes dst; when dst fails it closes src.
func (p *delayProxy) pipe(dst, src net.Conn) {
	type chunk struct {
		b   []byte
		due time.Time
	}
	queue := make(chan chunk, 256)
	go func() {
		defer close(queue)
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				queue <- chunk{append([]byte(nil), buf[:n]...), time.Now().Add(p.Delay())}
			}
			if err != nil {
				return
			}
		}
	}()
	failed := false
	for c := range queue {
		if failed {
			continue // drain, so the reader ends
		}
		sleepUntil(c.due)
		if _, err := dst.Write(c.b); err != nil {
			failed = true
			_ = src.Close()
		}
	}
	if cw, ok := dst.(interface{ CloseWrite() error }); ok && !failed {
		_ = cw.CloseWrite()
	} else {
		_ = dst.Close()
	}
}

// timerSlack is how late the kernel may wake a sleeping thread (Linux's
// default timer slack).
const timerSlack = 50 * time.Microsecond

// sleepUntil waits until about t with nanosleep(2), which blocks this
// goroutine's thread: Go's timers wake a millisecond late or more on this
// kind of machine, as much as the delay being made, while the kernel's
// high-resolution timers wake within their slack.
func sleepUntil(t time.Time) {
	for {
		d := time.Until(t) - timerSlack
		if d <= 0 {
			return
		}
		ts := syscall.NsecToTimespec(int64(d))
		if err := syscall.Nanosleep(&ts, nil); err == nil {
			return
		}
	}
}

// Close stops accepting, ends every connection and waits for them, at most
// 10 seconds.
func (p *delayProxy) Close() error {
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	err := p.ln.Close()
	done := make(chan struct{})
	go func() { p.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		return errors.New("delay proxy: connections did not end within 10s")
	}
	return err
}
