package idemhttp_test

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/idemhttp"
)

// h2Server is an HTTP/2 server over TLS (httptest's, with HTTP/2 on) that
// runs answers[i] for attempt i (the last repeats); client trusts it and
// speaks HTTP/2 to it.
func h2Server(t *testing.T, answers ...func(w http.ResponseWriter, r *http.Request)) (*script, *httptest.Server) {
	t.Helper()
	s := &script{answers: answers}
	srv := httptest.NewUnstartedServer(s)
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return s, srv
}

// abortHandler fails before any header is sent, as a handler that panics
// does: on HTTP/2 the server resets the stream with INTERNAL_ERROR.
func abortHandler(http.ResponseWriter, *http.Request) { panic(http.ErrAbortHandler) }

// TestTransportRetriesHTTP2StreamReset: a server that fails before its
// headers resets the HTTP/2 stream (RST_STREAM) where an HTTP/1.1 one
// drops the connection; the Transport retries both, with the same key.
func TestTransportRetriesHTTP2StreamReset(t *testing.T) {
	t.Run("INTERNAL_ERROR from a handler that aborts", func(t *testing.T) {
		t.Parallel()
		s, srv := h2Server(t, abortHandler, status(http.StatusCreated))
		client := &http.Client{Transport: &idemhttp.Transport{MaxAttempts: 3, BaseDelay: time.Millisecond, Base: srv.Client().Transport}}
		resp, err := client.Post(srv.URL+"/orders", "application/json", strings.NewReader(`{"item":1}`))
		if err != nil {
			t.Fatalf("err = %v, want the second attempt's 201", err)
		}
		defer resp.Body.Close()
		if resp.ProtoMajor != 2 || resp.StatusCode != http.StatusCreated {
			t.Fatalf("%s %d, want HTTP/2 201", resp.Proto, resp.StatusCode)
		}
		seen := s.seen()
		if len(seen) != 2 || seen[0].key == "" || seen[1].key != seen[0].key || seen[1].body != `{"item":1}` {
			t.Fatalf("attempts %+v, want two with one key and the whole body", seen)
		}
	})
	for _, tc := range []struct {
		name string
		code uint32
	}{
		{"INTERNAL_ERROR", 0x2},
		{"CANCEL", 0x8},
	} {
		t.Run(tc.name+" on the wire", func(t *testing.T) {
			t.Parallel()
			srv := newRawH2(t, tc.code, 1)
			client := &http.Client{Transport: &idemhttp.Transport{MaxAttempts: 3, BaseDelay: time.Millisecond, Base: h2cTransport(t)}}
			resp, err := client.Post(srv.url, "text/plain", strings.NewReader("x"))
			if err != nil {
				t.Fatalf("err = %v, want the second attempt's 200", err)
			}
			defer resp.Body.Close()
			if resp.ProtoMajor != 2 || resp.StatusCode != http.StatusOK || srv.streams.Load() != 2 {
				t.Fatalf("%s %d after %d streams, want HTTP/2 200 after 2", resp.Proto, resp.StatusCode, srv.streams.Load())
			}
		})
	}
	t.Run("not after the caller's own cancel", func(t *testing.T) {
		t.Parallel()
		started := make(chan struct{})
		s, srv := h2Server(t, func(w http.ResponseWriter, r *http.Request) {
			close(started)
			<-r.Context().Done() // the client cancels: the stream is reset
		})
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		go func() {
			select {
			case <-started:
				cancel()
			case <-time.After(10 * time.Second):
			}
		}()
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL, strings.NewReader("x"))
		client := &http.Client{Transport: &idemhttp.Transport{MaxAttempts: 3, BaseDelay: time.Millisecond, Base: srv.Client().Transport}}
		_, err := client.Do(req)
		ab := abandoned(t, err)
		if ab.Attempts != 1 || len(s.seen()) != 1 || !errors.Is(err, context.Canceled) {
			t.Fatalf("Attempts %d, %d seen (%v); want 1, and context.Canceled", ab.Attempts, len(s.seen()), err)
		}
	})
}

// TestDefaultRetryStreamResetCodes: of the HTTP/2 stream errors, those
// with INTERNAL_ERROR, REFUSED_STREAM and CANCEL are retried, as net/http
// reports them (its unexported type, made here with another code), as
// golang.org/x/net/http2 does (its StreamError, the same shape), and
// wrapped.
func TestDefaultRetryStreamResetCodes(t *testing.T) {
	// net/http's own type: an error from a real reset.
	_, srv := h2Server(t, abortHandler)
	req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader("x"))
	_, wire := srv.Client().Transport.RoundTrip(req)
	if wire == nil {
		t.Fatal("the aborting handler got an answer, want a stream reset")
	}
	netHTTP := func(code uint32) error {
		v := reflect.New(reflect.TypeOf(wire)).Elem()
		v.FieldByName("StreamID").SetUint(1)
		v.FieldByName("Code").SetUint(uint64(code))
		return v.Interface().(error)
	}
	xnet := func(code uint32) error { return StreamError{StreamID: 1, Code: ErrCode(code)} }
	for _, tc := range []struct {
		code  uint32
		retry bool
	}{
		{0x0, false}, // NO_ERROR
		{0x1, false}, // PROTOCOL_ERROR
		{0x2, true},  // INTERNAL_ERROR
		{0x3, false}, // FLOW_CONTROL_ERROR
		{0x7, true},  // REFUSED_STREAM
		{0x8, true},  // CANCEL
		{0xb, false}, // ENHANCE_YOUR_CALM
		{0xd, false}, // HTTP_1_1_REQUIRED
	} {
		for name, err := range map[string]error{
			"net/http":             netHTTP(tc.code),
			"x/net":                xnet(tc.code),
			"x/net pointer":        &StreamError{StreamID: 1, Code: ErrCode(tc.code)},
			"wrapped":              fmt.Errorf("attempt 1: %w", netHTTP(tc.code)),
			"joined":               errors.Join(errors.New("other"), xnet(tc.code)),
			"wrapped in url.Error": &urlError{err: netHTTP(tc.code)},
		} {
			if got := idemhttp.DefaultRetry(req, nil, err); got != tc.retry {
				t.Errorf("code 0x%x, %s (%v): DefaultRetry = %v, want %v", tc.code, name, err, got, tc.retry)
			}
		}
	}
	if !idemhttp.DefaultRetry(req, nil, wire) {
		t.Errorf("DefaultRetry(%v) = false, want true", wire)
	}
	// Lookalikes that are not stream errors.
	for _, err := range []error{lookalike{StreamID: 1, Code: 2}, StreamErrorText("stream error: stream ID 1; INTERNAL_ERROR")} {
		if idemhttp.DefaultRetry(req, nil, err) {
			t.Errorf("DefaultRetry(%T) = true, want false", err)
		}
	}
}

// StreamError and ErrCode have the shape of golang.org/x/net/http2's.
type (
	ErrCode     uint32
	StreamError struct {
		StreamID uint32
		Code     ErrCode
		Cause    error
	}
)

func (e StreamError) Error() string {
	return fmt.Sprintf("stream error: stream ID %d; %d", e.StreamID, e.Code)
}

// lookalike has the fields but another name; StreamErrorText has the name
// and the message but not the fields.
type (
	lookalike struct {
		StreamID uint32
		Code     uint32
	}
	StreamErrorText string
)

func (lookalike) Error() string         { return "stream error: stream ID 1; INTERNAL_ERROR" }
func (e StreamErrorText) Error() string { return string(e) }

// urlError wraps as *url.Error does (a pointer, Unwrap).
type urlError struct{ err error }

func (e *urlError) Error() string { return "Post: " + e.err.Error() }
func (e *urlError) Unwrap() error { return e.err }

// h2cTransport speaks HTTP/2 without TLS (prior knowledge) and nothing
// else.
func h2cTransport(t *testing.T) *http.Transport {
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Protocols: &p}
	t.Cleanup(tr.CloseIdleConnections)
	return tr
}

// rawH2 is an HTTP/2 server without TLS (prior knowledge) that speaks just
// enough of the protocol to reset the first resets streams with code and
// answer every later one 200 with no body, whatever it asks: a peer that
// resets a stream with any code, which Go's server does not do on demand.
type rawH2 struct {
	url     string
	streams atomic.Int64
}

// HTTP/2 frame types and flags used by rawH2 (RFC 9113, section 6).
const (
	frameHeaders   = 0x1
	frameRSTStream = 0x3
	frameSettings  = 0x4
	frameGoAway    = 0x7
	flagAck        = 0x1
	flagEndStream  = 0x1
	flagEndHeaders = 0x4
	// hpackStatus200 is ":status: 200", index 8 of HPACK's static table.
	hpackStatus200 = 0x88
)

func newRawH2(t *testing.T, code uint32, resets int64) *rawH2 {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &rawH2{url: "http://" + ln.Addr().String() + "/orders"}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns []net.Conn
	)
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() { s.serveConn(c, code, resets) })
		}
	})
	return s
}

func (s *rawH2) serveConn(c net.Conn, code uint32, resets int64) {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	r := bufio.NewReader(c)
	preface := make([]byte, len("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"))
	if _, err := io.ReadFull(r, preface); err != nil {
		return
	}
	write := func(typ, flags byte, stream uint32, payload []byte) error {
		hdr := make([]byte, 9, 9+len(payload))
		hdr[0], hdr[1], hdr[2] = byte(len(payload)>>16), byte(len(payload)>>8), byte(len(payload))
		hdr[3], hdr[4] = typ, flags
		binary.BigEndian.PutUint32(hdr[5:], stream)
		_, err := c.Write(append(hdr, payload...))
		return err
	}
	if write(frameSettings, 0, 0, nil) != nil {
		return
	}
	for range 1000 {
		var hdr [9]byte
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return
		}
		length := int(hdr[0])<<16 | int(hdr[1])<<8 | int(hdr[2])
		typ, flags, stream := hdr[3], hdr[4], binary.BigEndian.Uint32(hdr[5:])&0x7fffffff
		if _, err := io.CopyN(io.Discard, r, int64(length)); err != nil {
			return
		}
		var err error
		switch {
		case typ == frameSettings && flags&flagAck == 0:
			err = write(frameSettings, flagAck, 0, nil)
		case typ == frameHeaders:
			if s.streams.Add(1) <= resets {
				err = write(frameRSTStream, 0, stream, binary.BigEndian.AppendUint32(nil, code))
			} else {
				err = write(frameHeaders, flagEndHeaders|flagEndStream, stream, []byte{hpackStatus200})
			}
		case typ == frameGoAway:
			return
		}
		if err != nil {
			return
		}
	}
}
