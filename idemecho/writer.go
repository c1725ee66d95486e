package idemecho

import "net/http"

// runWriter is the http.ResponseWriter under the echo.Response of one run
// of the handler: idemhttp's buffer, which sends nothing before the
// commit, with a Flush that does nothing. echo.Response.Flush panics on a
// writer that cannot flush; here there is nothing to flush yet, and, as in
// idemgin, a handler that only flushed has not answered.
type runWriter struct {
	http.ResponseWriter
}

// Flush sends nothing: the answer is buffered until the commit.
func (runWriter) Flush() {}

// Unwrap returns idemhttp's buffer, for http.ResponseController, which
// reports what it cannot do (Hijack, deadlines) as http.ErrNotSupported.
func (w runWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
