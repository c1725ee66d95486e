package dialect

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
)

// The meanings a Dialect's Classify maps driver errors to. Package idem
// re-exports each one under the same name, so callers test them with
// errors.Is(err, idem.ErrDeadlock) and dialect authors return
// dialect.ErrDeadlock: it is the same value.
var (
	// ErrUniqueViolation: a unique or primary key constraint rejected a row.
	ErrUniqueViolation = errors.New("unique violation")
	// ErrSerialization: the database could not serialize this transaction
	// with a concurrent one (SQLSTATE 40001, SQLITE_BUSY_SNAPSHOT). Retrying
	// the whole transaction is safe.
	ErrSerialization = errors.New("serialization failure")
	// ErrDeadlock: the database chose this transaction as a deadlock victim.
	// Retrying the whole transaction is safe.
	ErrDeadlock = errors.New("deadlock")
	// ErrLockTimeout: a statement waited for a lock (or, on SQLite, for the
	// database) longer than allowed.
	ErrLockTimeout = errors.New("lock or busy timeout")
	// ErrReadOnly: the transaction or database does not accept writes.
	ErrReadOnly = errors.New("read-only transaction or database")
	// ErrTooLarge: a value exceeds what the database or connection accepts,
	// or (from package idem) the store's own limits on a response.
	ErrTooLarge = errors.New("value too large to store")
	// ErrInvalidValue: the database rejected a value it cannot represent
	// (an invalid byte sequence for its encoding, for example).
	ErrInvalidValue = errors.New("value rejected by the database")
	// ErrCommitUnknown: the connection broke during COMMIT, so whether the
	// transaction committed is unknown. A retry either replays or redoes.
	ErrCommitUnknown = errors.New("commit outcome unknown")
	// ErrTxDone: the transaction was already committed or rolled back.
	ErrTxDone = errors.New("transaction already committed or rolled back")
	// ErrTxAborted: a statement of the transaction failed and the database
	// aborted the whole transaction: it refuses every later statement
	// until the transaction ends, and a COMMIT rolls it back (PostgreSQL's
	// SQLSTATE 25P02, in_failed_sql_transaction, and a COMMIT it answered
	// with ROLLBACK). Nothing of the transaction can be kept; a retry of
	// the same work fails the same way unless what failed changed.
	ErrTxAborted = errors.New("transaction aborted by a statement that failed")
	// ErrBadTx: the transaction handed in cannot be used (nil, finished, or
	// not of the kind this driver runs on).
	ErrBadTx = errors.New("unusable transaction")
	// ErrNotClaimed: there is nothing of the caller's to complete: a
	// Dialect's Complete found no pending record this transaction claimed
	// (package idem also returns it for Complete on a claim that was not
	// won).
	ErrNotClaimed = errors.New("no pending claim to complete")
	// ErrUnavailable: the database cannot serve the request now, but
	// another attempt may succeed (a lost connection before COMMIT, a
	// server shutting down or starting up, a cluster node cut off from its
	// primary component). Nothing was committed.
	ErrUnavailable = errors.New("database unavailable")
	// ErrInvalidConfig: a constructor or Begin got an option it cannot
	// honour (a nil handle, another driver, an isolation level the database
	// lacks, a server too old). A Dialect that lacks an optional ability
	// (Admin, Leaser, Scripter) is not a configuration error: what needs it
	// fails with an error wrapping errors.ErrUnsupported.
	ErrInvalidConfig = errors.New("invalid config")
)

// Classified returns an error that wraps both meaning and err, so errors.Is
// finds the meaning and errors.As still finds the driver's typed error. A nil
// err stays nil.
func Classified(meaning, err error) error {
	if err == nil {
		return nil
	}
	return &classified{meaning: meaning, err: err}
}

type classified struct {
	meaning error
	err     error
}

func (c *classified) Error() string { return fmt.Sprintf("%v: %v", c.meaning, c.err) }

func (c *classified) Unwrap() []error { return []error{c.meaning, c.err} }

// IsClassified reports whether err already carries one of the meanings in
// this package, so Classify can return it unchanged.
func IsClassified(err error) bool {
	for _, m := range meanings {
		if errors.Is(err, m) {
			return true
		}
	}
	return false
}

var meanings = []error{
	ErrUniqueViolation, ErrSerialization, ErrDeadlock, ErrLockTimeout,
	ErrReadOnly, ErrTooLarge, ErrInvalidValue, ErrCommitUnknown, ErrTxDone, ErrTxAborted, ErrBadTx, ErrNotClaimed,
	ErrUnavailable, ErrInvalidConfig, ErrLeaseLost,
}

// ConnectionLost reports whether err says that the connection to the
// database broke or could not be made: an EOF in the middle of an answer, a
// reset, a refused or failed dial, a closed network connection. An ended
// context is not a lost connection. It looks at error types and values
// only. A dialect's Classify maps it to ErrUnavailable: for any statement
// but COMMIT, the transaction is gone and nothing was committed. (For
// COMMIT the outcome is unknown: see Tx.Commit.)
func ConnectionLost(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false
	}
	var opErr *net.OpError
	return errors.As(err, &opErr) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.ECONNREFUSED) ||
		errors.Is(err, syscall.ECONNABORTED) || errors.Is(err, syscall.EPIPE)
}
