package idem

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/idemkit/idem/dialect"
)

// Errors for input the store refuses. Each is returned before anything is
// written (or, from Complete, before anything is stored; Do then rolls the
// whole transaction back). Test them with errors.Is.
var (
	// ErrInvalidKey: the idempotency key is empty, longer than MaxKeyBytes
	// or holds a byte outside printable ASCII (0x20-0x7E).
	ErrInvalidKey = errors.New("idem: invalid idempotency key")
	// ErrInvalidScope: the scope is empty, longer than MaxScopeBytes, not
	// UTF-8 or holds a control character.
	ErrInvalidScope = errors.New("idem: invalid scope")
	// ErrInvalidResponse: the status code is neither NoStatus (0) nor
	// within 100-599.
	ErrInvalidResponse = errors.New("idem: invalid response")
	// ErrAlreadyCompleted: Complete was called twice on one claim.
	ErrAlreadyCompleted = errors.New("idem: claim already completed")
	// ErrNotFound: Lookup found no live record (Inspect and Delete: no
	// record at all). The message says which: no record, or a record whose
	// retention passed (it awaits Purge).
	ErrNotFound = errors.New("idem: not found")
	// ErrRetriesExhausted: Do gave up after Config.MaxAttempts attempts that
	// failed with retryable errors. The error is a *RetryError.
	ErrRetriesExhausted = errors.New("idem: retries exhausted")
	// ErrSchemaNewer: Migrate found the table at a schema version newer
	// than this code knows; an older binary must not write to it.
	ErrSchemaNewer = errors.New("idem: database schema is newer than this code")
	// ErrCommitTimeout: Config.CommitTimeout passed while the completion
	// or COMMIT of work whose function had returned still ran (in Do, or
	// in DoLease's completion or release). It is the cause (context.Cause)
	// of the context they ran on, whose Err is then
	// context.DeadlineExceeded, not context.Canceled: the caller's context
	// did not end. Unless the error also matches ErrCommitUnknown, nothing
	// was committed. Retryable.
	ErrCommitTimeout = errors.New("idem: Config.CommitTimeout passed before the transaction finished")
	// ErrNotAnOutcome is what a function returns, together with its
	// response, to answer without storing: the request never began (it
	// failed validation, say), so its answer is not the key's outcome.
	// Do rolls the transaction back and returns the response with
	// Committed false, leaving the key free: a corrected request with the
	// same key runs. In lease mode (DoLease) the lease's record is deleted
	// the same way (Lease.Forget), unless the work recorded a step: then it
	// began, the lease is released and DoLease fails with an error
	// matching ErrWorkBegan and ErrInvalidResponse. Wrap it to add
	// context; errors.Is finds it.
	ErrNotAnOutcome = errors.New("idem: not an outcome: the request never began")
	// ErrWorkBegan: a lease's work recorded a step, so its answer is an
	// outcome, and it cannot be forgotten (Lease.Forget, or DoLease's
	// function returning ErrNotAnOutcome after a step). The lease is
	// released instead. It is apart from ErrNotAnOutcome so that a
	// function passing this error on is not taken to mark its own answer
	// as not an outcome.
	ErrWorkBegan = errors.New("idem: the work began: it recorded a step")
)

// The database meanings, re-exported from package dialect (the same values,
// so errors.Is works with either name). Dialects map their typed driver
// errors to these.
var (
	// ErrInvalidConfig: a Config field is out of range, the table name is
	// not an identifier (then it also matches dialect.ErrInvalidIdentifier),
	// or a driver was given something it cannot use.
	ErrInvalidConfig = dialect.ErrInvalidConfig
	// ErrUnavailable: retryable; the database could not serve the request
	// (a lost connection, a server shutting down, a cluster node cut off)
	// and nothing was committed. Do retries the whole transaction.
	ErrUnavailable = dialect.ErrUnavailable
	// ErrSerialization: retryable; Do retries the whole transaction.
	ErrSerialization = dialect.ErrSerialization
	// ErrDeadlock: retryable; Do retries the whole transaction.
	ErrDeadlock = dialect.ErrDeadlock
	// ErrLockTimeout: a lock (or SQLite's database) was held past the wait
	// bound. During a claim it becomes the InFlight outcome.
	ErrLockTimeout = dialect.ErrLockTimeout
	// ErrUniqueViolation: a unique constraint rejected a row.
	ErrUniqueViolation = dialect.ErrUniqueViolation
	// ErrReadOnly: the transaction or database does not accept writes.
	ErrReadOnly = dialect.ErrReadOnly
	// ErrTooLarge: a value is too large to store. The store refuses a
	// response whose body exceeds Config.MaxBody or whose encoded header
	// exceeds MaxHeaderBytes before anything is written (the message says
	// which limit); the database or connection may refuse a value too.
	// Retrying the same request does not help.
	ErrTooLarge = dialect.ErrTooLarge
	// ErrInvalidValue: the database rejected a value it cannot represent.
	ErrInvalidValue = dialect.ErrInvalidValue
	// ErrCommitUnknown: the connection broke during COMMIT; the outcome is
	// unknown. A retry with the same key either replays or redoes the work.
	ErrCommitUnknown = dialect.ErrCommitUnknown
	// ErrTxDone: the transaction was already committed or rolled back (it
	// also matches ErrBadTx when returned from Claim or Complete). When the
	// function given to Do ended the transaction itself, the error is a
	// *TxEndedError, which says whether the claim was committed.
	ErrTxDone = dialect.ErrTxDone
	// ErrTxAborted: a statement of the transaction failed and the database
	// (PostgreSQL) aborted the whole transaction: every later statement
	// fails, and nothing of it can be kept. When the function given to Do
	// answered after such a failure (it caught a unique violation and
	// answered 409, say), Do rolls back and stores nothing: a client error
	// (4xx) is returned as the function's answer, with Result.NotStored
	// saying why; any other answer claimed work that did not happen, and
	// Do returns an error matching ErrTxAborted. Not retryable. Claim and
	// Complete in such a transaction also match ErrBadTx.
	ErrTxAborted = dialect.ErrTxAborted
	// ErrBadTx: the transaction handed in is nil, finished, read-only or of
	// a kind the driver cannot use.
	ErrBadTx = dialect.ErrBadTx
	// ErrNotClaimed: there is nothing of this caller's to complete. Complete
	// was called on a claim this transaction did not win (a lease's writes
	// on a lease it did not win, likewise), or found no in-flight record for
	// the claim in the database (for example, it ran in another transaction,
	// or the record was taken over).
	ErrNotClaimed = dialect.ErrNotClaimed
	// ErrLeaseLost: a lease holder's write found its lease taken over (or
	// ended): it must stop; nothing was written.
	ErrLeaseLost = dialect.ErrLeaseLost
)

// RetryError is returned by Do when every attempt failed with a retryable
// error. Err is the last attempt's error. At most one attempt's effect can
// have committed (none, unless a commit's outcome was unknown).
type RetryError struct {
	// Attempts is how many transactions Do ran.
	Attempts int
	// Err is the last attempt's error.
	Err error
}

// Error describes the exhaustion and the last error.
func (e *RetryError) Error() string {
	return fmt.Sprintf("idem: gave up after %d attempts: %v", e.Attempts, e.Err)
}

// Unwrap returns ErrRetriesExhausted and the last error.
func (e *RetryError) Unwrap() []error { return []error{ErrRetriesExhausted, e.Err} }

// TxEndedError is returned by Do when its function committed or rolled back
// the transaction Do gave it, so the response could not be stored with the
// work. It matches ErrTxDone and the driver's error.
//
// When ClaimCommitted is true the function committed: its writes and the
// in-flight claim are in the database, and the response is not. A retry of
// the key then gets InFlight (HTTP 409) until ExpiresAt, and after that the
// work is done again. When it is false (and Unknown is false) the function
// rolled back: nothing was kept and a retry does the work.
type TxEndedError struct {
	// Scope and Key name the request.
	Scope, Key string
	// ClaimCommitted: the key's in-flight claim was found committed.
	ClaimCommitted bool
	// ExpiresAt is when a committed claim expires.
	ExpiresAt time.Time
	// Unknown: reading the key afterwards failed, so neither is known.
	Unknown bool
	// Err is the error the completion or COMMIT met.
	Err error
}

// Error says what the function did and what a retry will see.
func (e *TxEndedError) Error() string {
	switch {
	case e.Unknown:
		return fmt.Sprintf("idem: key %q in scope %q: the function ended the transaction; whether it committed is unknown: %v", e.Key, e.Scope, e.Err)
	case e.ClaimCommitted:
		return fmt.Sprintf("idem: key %q in scope %q: the function committed the transaction itself, so the response was not stored; the key stays in flight until %s: %v",
			e.Key, e.Scope, e.ExpiresAt.Format(time.RFC3339), e.Err)
	}
	return fmt.Sprintf("idem: key %q in scope %q: the function rolled the transaction back itself; nothing was kept: %v", e.Key, e.Scope, e.Err)
}

// Unwrap returns ErrTxDone and the driver's error.
func (e *TxEndedError) Unwrap() []error { return []error{ErrTxDone, e.Err} }

// retryable reports whether a whole transaction may be retried after err,
// with a chance of another outcome.
func retryable(err error) bool {
	return errors.Is(err, ErrSerialization) || errors.Is(err, ErrDeadlock) || errors.Is(err, ErrUnavailable)
}

// Retryable reports whether calling Do (or Purge) again with the same
// request may succeed where this call failed: a commit's outcome is unknown
// (ErrCommitUnknown: the retry replays or does the work once, also when
// the caller's context ended meanwhile), the commit timeout passed
// (ErrCommitTimeout), Do's retries ran out (ErrRetriesExhausted), a claim
// waited out its bound (ErrLockTimeout), or the database was unavailable.
// A retry with the same key is always safe; this says whether it is worth
// making. Bad input, a function's own errors, an aborted transaction
// (ErrTxAborted) and an ended context are not retryable.
func Retryable(err error) bool {
	switch {
	case err == nil:
		return false
	case errors.Is(err, ErrCommitUnknown), errors.Is(err, ErrCommitTimeout):
		return true
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return false
	}
	return retryable(err) || errors.Is(err, ErrRetriesExhausted) || errors.Is(err, ErrLockTimeout)
}
