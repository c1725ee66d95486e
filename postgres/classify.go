package postgres

import (
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemkit/idem/dialect"
)

// SQLSTATE codes the dialect maps (see PostgreSQL's errcodes appendix).
const (
	uniqueViolation            = "23505"
	serializationFailure       = "40001"
	statementCompletionUnknown = "40003" // CockroachDB: the COMMIT may or may not have happened
	deadlockDetected           = "40P01"
	lockNotAvailable           = "55P03"
	queryCanceled              = "57014"
	adminShutdown              = "57P01"
	crashShutdown              = "57P02"
	cannotConnectNow           = "57P03"
	readOnlyTransaction        = "25006"
	inFailedTransaction        = "25P02"
	characterNotInRepertoire   = "22021"
	untranslatableCharacter    = "22P05"
	programLimitExceeded       = "54000"
	duplicatePreparedStatement = "42P05"
	invalidStatementName       = "26000" // the prepared statement named does not exist
	// notClaimedCode is the SQLSTATE the guarded completion raises when it
	// updated no row (a division by a count of zero).
	notClaimedCode = "22012"
)

// Classify maps SQLSTATE codes, pgx's closed-transaction error, a COMMIT
// answered with ROLLBACK and lost or closed connections to the dialect
// meanings; a hot standby's refusal to write is ErrUnavailable (standby.go).
func (*postgresDialect) Classify(err error) error {
	if err == nil || dialect.IsClassified(err) {
		return err
	}
	switch {
	case errors.Is(err, pgx.ErrTxClosed):
		return dialect.Classified(dialect.ErrTxDone, err)
	case errors.Is(err, pgx.ErrTxCommitRollback):
		// The server rolled the COMMIT back: a statement had failed and
		// aborted the transaction.
		return dialect.Classified(dialect.ErrTxAborted, err)
	}
	var se *standbyError
	if errors.As(err, &se) {
		return dialect.Classified(dialect.ErrUnavailable, err)
	}
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		var ce *pgconn.ConnectError
		if errors.As(err, &ce) || errors.Is(err, pgconn.ErrConnClosed) || dialect.ConnectionLost(err) {
			return dialect.Classified(dialect.ErrUnavailable, err)
		}
		return err
	}
	switch {
	case pe.Code == uniqueViolation:
		return dialect.Classified(dialect.ErrUniqueViolation, err)
	case pe.Code == serializationFailure:
		return dialect.Classified(dialect.ErrSerialization, err)
	case pe.Code == deadlockDetected:
		return dialect.Classified(dialect.ErrDeadlock, err)
	case pe.Code == statementCompletionUnknown:
		return dialect.Classified(dialect.ErrCommitUnknown, err)
	case pe.Code == lockNotAvailable, pe.Code == queryCanceled:
		// 57014 is statement_timeout or a cancel; a cancelled context is
		// told apart by the caller's ctx.Err().
		return dialect.Classified(dialect.ErrLockTimeout, err)
	case pe.Code == adminShutdown, pe.Code == crashShutdown, pe.Code == cannotConnectNow,
		len(pe.Code) == 5 && pe.Code[:2] == "08": // connection exceptions
		return dialect.Classified(dialect.ErrUnavailable, err)
	case pe.Code == readOnlyTransaction:
		return dialect.Classified(dialect.ErrReadOnly, err)
	case pe.Code == inFailedTransaction:
		return dialect.Classified(dialect.ErrTxAborted, err)
	case pe.Code == characterNotInRepertoire, pe.Code == untranslatableCharacter:
		return dialect.Classified(dialect.ErrInvalidValue, err)
	case pe.Code == programLimitExceeded:
		return dialect.Classified(dialect.ErrTooLarge, err)
	case pe.Code == duplicatePreparedStatement, pe.Code == invalidStatementName:
		return dialect.Classified(dialect.ErrInvalidConfig, &statementsError{err})
	}
	return err
}

// ErrPreparedStatements marks a prepared statement the server connection
// did not have (SQLSTATE 26000) or already had (42P05) although the client's
// session prepared it or never did: the session does not own its server
// connection. That is what a proxy in transaction pooling mode does to a
// driver that caches prepared statements per connection (pgx by default):
// PgBouncer before 1.21, or later without max_prepared_statements, and any
// pooler without prepared statement support. The error, also classified
// ErrInvalidConfig and never retried, says what to set; docs/clusters.md
// lists the combinations that work.
var ErrPreparedStatements = errors.New("postgres: prepared statements of another session: behind a transaction-pooling proxy, " +
	"set max_prepared_statements in PgBouncer (1.21 or later), " +
	"or put default_query_exec_mode=exec (or simple_protocol) in the DSN")

// statementsError is a 42P05 or 26000 with ErrPreparedStatements' advice.
type statementsError struct{ err error }

func (e *statementsError) Error() string {
	return e.err.Error() + "; " + ErrPreparedStatements.Error()
}

func (e *statementsError) Unwrap() []error { return []error{e.err, ErrPreparedStatements} }

// commitError classifies an error from COMMIT: a server error or one raised
// before anything was sent is a known failure; anything else (the
// connection broke after COMMIT left, or a COMMIT in flight was
// interrupted) leaves the outcome unknown.
func commitError(err error) error {
	if err == nil {
		return nil
	}
	// pgconn.SafeToRetry cannot tell here: once the connection is gone pgx
	// reports even an answer lost after COMMIT left as safe to retry, and
	// a pipeline that broke after COMMIT left as pgconn.ErrConnClosed.
	// Without the server's answer the outcome is unknown.
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		if pe.Code == statementCompletionUnknown {
			return dialect.Classified(dialect.ErrCommitUnknown, err)
		}
		return err
	}
	if errors.Is(err, pgx.ErrTxCommitRollback) || errors.Is(err, pgx.ErrTxClosed) || dialect.IsClassified(err) {
		return err
	}
	return dialect.Classified(dialect.ErrCommitUnknown, err)
}

// sqlCommitError is commitError for a COMMIT through database/sql, which
// hides COMMIT's result when an error follows it. A server that ends the
// session (a FATAL: a shutdown, pg_terminate_backend) while a COMMIT runs
// can commit it and send the FATAL right behind COMMIT's result (as it
// does to a pipelined COMMIT), so its outcome is unknown. The pgx
// transaction (the Driver's, HoldBegin's) sees the result and needs no such
// rule.
func sqlCommitError(err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && (severity(pe) == "FATAL" || severity(pe) == "PANIC") {
		return dialect.Classified(dialect.ErrCommitUnknown, err)
	}
	return commitError(err)
}

// severity is the error's severity in English (the server sends it
// localized too).
func severity(pe *pgconn.PgError) string {
	if pe.SeverityUnlocalized != "" {
		return pe.SeverityUnlocalized
	}
	return pe.Severity
}

// completionError turns the guarded completion's failure into
// ErrNotClaimed.
func completionError(err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && pe.Code == notClaimedCode {
		return dialect.Classified(dialect.ErrNotClaimed, err)
	}
	return err
}
