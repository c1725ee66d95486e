package idemhttp

import (
	"errors"
	"fmt"
	"net/http"
)

// statusCoder is an error that carries the HTTP status it answers, as web
// frameworks' errors do (echo v5's *echo.HTTPError has this method;
// idemecho gives echo v4's one). A request body whose reader fails with
// one reporting 413 is over a limit set before the middleware (echo's
// BodyLimit, for one).
type statusCoder interface {
	StatusCode() int
}

// bodyTooLarge reports whether err, the failure to read a request body,
// says the body is over a limit, and returns the detail of the 413 that
// answers it: net/http's *http.MaxBytesError (Config.MaxRequestBody, or an
// http.MaxBytesReader before the middleware) or an error with a
// StatusCode method reporting 413 (a framework's body limit).
func bodyTooLarge(err error) (string, bool) {
	var maxBytes *http.MaxBytesError
	if errors.As(err, &maxBytes) {
		return fmt.Sprintf("The request body is larger than %d bytes. Nothing was done.", maxBytes.Limit), true
	}
	var coder statusCoder
	if errors.As(err, &coder) && coder.StatusCode() == http.StatusRequestEntityTooLarge {
		return "The request body is larger than this endpoint accepts. Nothing was done.", true
	}
	return "", false
}
