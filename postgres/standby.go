package postgres

import (
	"errors"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemkit/idem/dialect"
)

// A hot standby refuses every write with SQLSTATE 25006, the code a READ
// ONLY transaction gets. The two mean different things to a caller: a READ
// ONLY transaction is a mistake in the code that began it (ErrReadOnly,
// ErrBadTx, not retried), while a standby is "not the primary, for now".
// Behind a router that follows the primary (HAProxy on Patroni's
// GET /primary, which answers 200 as soon as a node holds the leader key,
// before its PostgreSQL has finished its promotion), a failover sends new
// sessions to a server still in recovery for a moment; a retry a moment
// later, often on the same session, writes. On such a session Classify
// makes the refusal ErrUnavailable, which Do retries.
//
// The server tells its sessions whether it is a standby: PostgreSQL 14 and
// later report in_hot_standby when the session starts and again when the
// server leaves recovery. idem reads it where it holds the connection: the
// pgx Driver's and HoldBegin's transactions, the caller's pgx.Tx
// (Store.Claim) and the database/sql transactions Do begins. On the
// caller's *sql.Tx idem cannot see the connection, and a standby's 25006
// stays ErrReadOnly. A transaction that began just before the promotion
// ended stays read only while the session may already read
// in_hot_standby off: where idem sends BEGIN with the statement (the pgx
// Driver, HoldBegin) it also reads the parameter before sending, elsewhere
// such a refusal, rarer than rare, stays ErrReadOnly.
//
// The pgx Driver closes a session a standby refused rather than give it
// back to the pool: behind a router, a session left on a demoted server
// (HAProxy without on-marked-down shutdown-sessions) would be refused
// again by every later attempt, while a new one goes where the router
// points now.

// ErrStandby marks a write a hot standby refused (SQLSTATE 25006 on a
// session whose server reports in_hot_standby): the session reached a
// server that is not the primary, for now. Such an error also matches
// idem.ErrUnavailable, which Do retries, and wraps the server's
// *pgconn.PgError.
var ErrStandby = errors.New("postgres: the server is a hot standby, not the primary")

// standbyError is a 25006 from a server in hot standby.
type standbyError struct{ err error }

func (e *standbyError) Error() string {
	return e.err.Error() + " (the server is a hot standby, not the primary: in_hot_standby is on)"
}

func (e *standbyError) Unwrap() []error { return []error{e.err, ErrStandby} }

// inHotStandby reports whether conn's server last said it is a standby.
func inHotStandby(conn *pgconn.PgConn) bool {
	return conn != nil && conn.ParameterStatus("in_hot_standby") == "on"
}

// onStandby marks err, a statement's error on a session whose server was
// in hot standby (wasStandby: before the statement was sent) or is, as a
// standby's refusal when it is a 25006.
func onStandby(conn *pgconn.PgConn, wasStandby bool, err error) error {
	if !readOnlyRefusal(err) {
		return err
	}
	var se *standbyError
	if errors.As(err, &se) {
		return err
	}
	if wasStandby || inHotStandby(conn) {
		return &standbyError{err}
	}
	return err
}

// readOnlyRefusal reports whether err is the server's 25006.
func readOnlyRefusal(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == readOnlyTransaction
}

// standbyRows marks a standby's refusal that a query reports while its
// rows are read (pgx reports the server's error there, not from Query).
type standbyRows struct {
	dialect.Rows
	mark func(error) error
}

func (r standbyRows) Err() error   { return r.mark(r.Rows.Err()) }
func (r standbyRows) Close() error { return r.mark(r.Rows.Close()) }
