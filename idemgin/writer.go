package idemgin

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"

	"github.com/gin-gonic/gin"
)

// notWritten is runWriter.size before the header is written, as in gin.
const notWritten = -1

// runWriter is the gin.ResponseWriter of one run of a wrapped handler. It
// writes to w, the buffer idemhttp gives the run, with gin's rules: the
// status set by WriteHeader is held until the first write (or
// WriteHeaderNow), and ignored once the header is written. Nothing reaches
// the client before the commit, so it sends nothing early: informational
// statuses are dropped, Flush sends nothing, Hijack fails and there is no
// Pusher.
type runWriter struct {
	w        http.ResponseWriter
	ctx      context.Context // the run's request context, for CloseNotify
	status   int
	size     int  // body bytes written; notWritten until the header is
	explicit bool // the handler set a final status

	closed    chan bool   // CloseNotify's channel, made on first use
	stopClose func() bool // stops the context.AfterFunc feeding closed
}

var _ gin.ResponseWriter = (*runWriter)(nil)

func newRunWriter(ctx context.Context, w http.ResponseWriter) *runWriter {
	return &runWriter{w: w, ctx: ctx, status: http.StatusOK, size: notWritten}
}

// Header returns the header map of the run's answer.
func (rw *runWriter) Header() http.Header { return rw.w.Header() }

// WriteHeader sets the status sent with the header. As in gin, it is held
// until the first write, a code <= 0 is ignored, and so is a change after
// the header was written. An informational code (1xx) is dropped: it
// cannot be sent before the commit.
func (rw *runWriter) WriteHeader(code int) {
	if code <= 0 || code < http.StatusOK || rw.Written() {
		return
	}
	rw.status = code
	rw.explicit = true
}

// WriteHeaderNow writes the header with the status set so far (200 if
// none) unless it is written already.
func (rw *runWriter) WriteHeaderNow() {
	if rw.Written() {
		return
	}
	rw.size = 0
	rw.explicit = true
	rw.w.WriteHeader(rw.status)
}

// Write writes the header if it is not yet written, then p.
func (rw *runWriter) Write(p []byte) (int, error) {
	rw.WriteHeaderNow()
	n, err := rw.w.Write(p)
	rw.size += n
	return n, err
}

// WriteString is Write of a string.
func (rw *runWriter) WriteString(s string) (int, error) {
	rw.WriteHeaderNow()
	n, err := io.WriteString(rw.w, s)
	rw.size += n
	return n, err
}

// Status returns the status set so far: 200 until the handler sets one.
func (rw *runWriter) Status() int { return rw.status }

// Size returns the body bytes written so far: -1 before the header is
// written, 0 after.
func (rw *runWriter) Size() int { return rw.size }

// Written reports whether the header is written.
func (rw *runWriter) Written() bool { return rw.size != notWritten }

// Flush sends nothing: the answer is buffered until the commit. Like gin's,
// it writes the header, when the handler set a status; a handler that only
// flushed has not answered.
func (rw *runWriter) Flush() {
	if rw.explicit {
		rw.WriteHeaderNow()
	}
}

// Hijack fails, with an error matching http.ErrNotSupported: the
// connection cannot be taken over inside a transaction whose answer is
// sent after the commit.
func (rw *runWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	return nil, nil, fmt.Errorf("idemgin: cannot hijack the connection of an idempotent request, whose answer is sent after the commit: %w", http.ErrNotSupported)
}

// CloseNotify returns a channel that receives true when the run's request
// context ends (the client went away, or the server shut down). Prefer
// c.Request.Context(). Deprecated in net/http, kept for gin's interface.
func (rw *runWriter) CloseNotify() <-chan bool {
	if rw.closed == nil {
		ch := make(chan bool, 1)
		rw.closed = ch
		rw.stopClose = context.AfterFunc(rw.ctx, func() { ch <- true })
	}
	return rw.closed
}

// Pusher returns nil: nothing can be pushed before the commit.
func (rw *runWriter) Pusher() http.Pusher { return nil }

// close ends the run's writer: CloseNotify's channel no longer fires.
func (rw *runWriter) close() {
	if rw.stopClose != nil {
		rw.stopClose()
	}
}

// ErrAnswered is the error of a write to c.Writer after a wrapped handler
// returned: the middleware's answer (which may be stored and replayed) was
// sent, and nothing may be added to it. gin records it in c.Errors when a
// later c.JSON or c.String fails with it.
var ErrAnswered = errors.New("idemgin: the idempotent answer was already sent; a write after it was dropped")

// sealedWriter is gin's writer once the middleware has answered: it reports
// the answer's status and size, and refuses to change the answer.
type sealedWriter struct {
	gin.ResponseWriter
}

// WriteHeader does nothing: the answer's header is sent.
func (sealedWriter) WriteHeader(int) {}

// WriteHeaderNow does nothing: the answer's header is sent.
func (sealedWriter) WriteHeaderNow() {}

// Write refuses p with ErrAnswered.
func (sealedWriter) Write([]byte) (int, error) { return 0, ErrAnswered }

// WriteString refuses s with ErrAnswered.
func (sealedWriter) WriteString(string) (int, error) { return 0, ErrAnswered }

// Hijack fails: the answer is sent.
func (sealedWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	return nil, nil, fmt.Errorf("idemgin: cannot hijack the connection after the idempotent answer: %w", http.ErrNotSupported)
}
