package main

import (
	"bytes"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// echoServer answers every connection with what it reads, on 127.0.0.1.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return ln.Addr().String()
}

func startProxy(t *testing.T, upstream string, delay time.Duration, conns int) *delayProxy {
	t.Helper()
	p, err := startDelayProxy(upstream, delay, conns)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Error(err)
		}
	})
	return p
}

func dialProxy(t *testing.T, p *delayProxy) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", p.Addr(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	return c
}

// roundTrip writes msg and reads it back, returning how long it took.
func roundTrip(t *testing.T, c net.Conn, msg []byte) time.Duration {
	t.Helper()
	start := time.Now()
	if _, err := c.Write(msg); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, msg) {
		t.Fatalf("read back %q, want %q", got, msg)
	}
	return time.Since(start)
}

func TestDelayProxyForwardsBytesInOrder(t *testing.T) {
	p := startProxy(t, echoServer(t), time.Millisecond, 4)
	c := dialProxy(t, p)
	// Many small writes back to back (a pipeline), then one large one:
	// everything comes back, in order.
	var want bytes.Buffer
	go func() {
		for i := range 200 {
			msg := []byte{byte(i), byte(i >> 8), 'x'}
			_, _ = c.Write(msg)
		}
		_, _ = c.Write(bytes.Repeat([]byte("0123456789"), 50_000))
	}()
	for i := range 200 {
		want.Write([]byte{byte(i), byte(i >> 8), 'x'})
	}
	want.Write(bytes.Repeat([]byte("0123456789"), 50_000))
	got := make([]byte, want.Len())
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want.Bytes()) {
		t.Fatal("the bytes that came back differ from the bytes sent")
	}
}

func TestDelayProxyAddsTheDelay(t *testing.T) {
	up := echoServer(t)
	const delay = 5 * time.Millisecond
	direct, err := net.DialTimeout("tcp", up, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close()
	slow := dialProxy(t, startProxy(t, up, delay, 4))
	msg := []byte("ping")
	var fast, delayed []time.Duration
	for range 20 {
		fast = append(fast, roundTrip(t, direct, msg))
		delayed = append(delayed, roundTrip(t, slow, msg))
	}
	added := median(delayed) - median(fast)
	// One delay each way; the upper bound leaves room for a busy machine.
	if added < 2*delay || added > 2*delay+20*time.Millisecond {
		t.Fatalf("the proxy added %v to a round trip (median of 20), want about %v", added, 2*delay)
	}
	// A pipeline of messages is delayed once, not once per message.
	start := time.Now()
	for range 10 {
		if _, err := slow.Write(msg); err != nil {
			t.Fatal(err)
		}
	}
	got := make([]byte, 10*len(msg))
	if _, err := io.ReadFull(slow, got); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 10*delay {
		t.Fatalf("10 pipelined messages took %v, want about one round trip (%v)", took, 2*delay)
	}
}

func TestDelayProxyRefusesOtherHostsAndBoundsConnections(t *testing.T) {
	// Upstream not on loopback: the connection is closed at once.
	p := startProxy(t, "192.0.2.1:5432", 0, 4)
	c := dialProxy(t, p)
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatal("a connection to a non-loopback upstream was forwarded")
	}
	// At most maxConns connections: the next one is closed.
	q := startProxy(t, echoServer(t), 0, 1)
	first := dialProxy(t, q)
	roundTrip(t, first, []byte("a"))
	second := dialProxy(t, q)
	_ = second.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, _ = second.Write([]byte("b"))
	if _, err := second.Read(make([]byte, 1)); err == nil {
		t.Fatal("a connection past the bound was forwarded")
	}
	roundTrip(t, first, []byte("c"))
}

func TestDelayProxyCloseEndsConnections(t *testing.T) {
	p, err := startDelayProxy(echoServer(t), time.Millisecond, 4)
	if err != nil {
		t.Fatal(err)
	}
	c := dialProxy(t, p)
	roundTrip(t, c, []byte("x"))
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatal("a connection outlived the proxy")
	}
	if _, err := net.DialTimeout("tcp", p.Addr(), time.Second); err == nil {
		t.Fatal("the proxy still accepts after Close")
	}
}

func TestDelayProxyCalibratesToARoundTrip(t *testing.T) {
	p := startProxy(t, echoServer(t), 0, 4)
	c := dialProxy(t, p)
	rtt := func() (time.Duration, error) {
		var d []time.Duration
		for range 15 {
			d = append(d, roundTrip(t, c, []byte("ping")))
		}
		return median(d), nil
	}
	const want = 4 * time.Millisecond
	got, err := p.calibrate(want, rtt)
	if err != nil {
		t.Fatal(err)
	}
	if got < want-time.Millisecond || got > want+2*time.Millisecond {
		t.Fatalf("calibrated round trip %v, want about %v (delay each way %v)", got, want, p.Delay())
	}
	if d := p.Delay(); d < time.Millisecond || d > want/2 {
		t.Fatalf("delay each way %v, want a little under %v", d, want/2)
	}
}
