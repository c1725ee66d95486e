package idemecho

import (
	"errors"
	"io"
	"net/http"

	"github.com/labstack/echo/v4"
)

// withStatusBody returns r (a copy the adapter owns) with its body read
// through statusBody, so that idemhttp, which reads the body before the
// handler runs, learns the status of an *echo.HTTPError the body fails
// with: echo's BodyLimit middleware fails a body over its limit with
// echo.ErrStatusRequestEntityTooLarge, and idemhttp answers it 413, as echo
// would, rather than 400 for an unreadable body.
func withStatusBody(r *http.Request) *http.Request {
	if r.Body != nil && r.Body != http.NoBody {
		r.Body = statusBody{r.Body}
	}
	return r
}

// statusBody is a request body whose read errors that hold an
// *echo.HTTPError report its status through StatusCode, the interface
// idemhttp reads a body error's status with.
type statusBody struct {
	io.ReadCloser
}

// Read reads from the body; an error holding an *echo.HTTPError comes back
// as a *statusError.
func (b statusBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	var he *echo.HTTPError
	if err != nil && errors.As(err, &he) {
		err = &statusError{err: err, status: he.Code}
	}
	return n, err
}

// statusError is an error reading a request body, with the HTTP status the
// *echo.HTTPError it holds answers.
type statusError struct {
	err    error
	status int
}

func (e *statusError) Error() string { return e.err.Error() }

// Unwrap returns the error as echo's reader returned it.
func (e *statusError) Unwrap() error { return e.err }

// StatusCode returns the status of the *echo.HTTPError.
func (e *statusError) StatusCode() int { return e.status }
