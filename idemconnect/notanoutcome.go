package idemconnect

// NotAnOutcome marks a handler's error as an answer that is not the
// outcome of its key: the request never began (it failed validation,
// referred to something absent, met a precondition the client can fix),
// so the client may correct it and call again with the same key. The
// interceptor sends err as it is (without the mark), rolls the transaction
// back, so nothing the handler wrote commits, and stores nothing: the next
// call with the key runs the handler.
//
// CodeInvalidArgument needs no mark: by default (DefaultStoreCode) it is
// never stored. Mark another code the handler answers before its work
// began (a CodeNotFound for a referenced resource, say); an answer about
// work that was done is an outcome: do not mark it. Return the marked
// error as the handler's own. It returns nil for a nil err. Outside the
// interceptor connect answers it as err (it unwraps to err's
// *connect.Error).
func NotAnOutcome(err error) error {
	if err == nil {
		return nil
	}
	return &notAnOutcome{err: err}
}

// notAnOutcome is an error NotAnOutcome marked.
type notAnOutcome struct{ err error }

func (e *notAnOutcome) Error() string { return e.err.Error() }
func (e *notAnOutcome) Unwrap() error { return e.err }
