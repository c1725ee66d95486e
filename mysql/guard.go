package mysql

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"strings"
	"time"

	mysqldriver "github.com/go-sql-driver/mysql"

	"github.com/idemkit/idem/dialect"
)

// A Galera node can roll a transaction back without telling any statement.
// Its applier aborts a local transaction whose rows another node's write set
// needs (a brute-force abort), and the session's next command is normally
// told with 1213 (even a COM_STMT_CLOSE, which has no answer, passes the
// error on: wsrep-lib's keep_command_error); but the history check saw the
// abort reach no statement about once in six runs of 300 operations, and a
// caller's code may swallow the 1213 it got. After such an abort the
// session is outside any transaction: with autocommit on, every later
// statement commits on its own (a function's writes stay, though its claim
// was rolled back and another node's request did the work) and the COMMIT
// of nothing succeeds.
//
// Behind Vitess's vtgate the same happens on purpose: a transaction refused a
// second shard (transaction_mode SINGLE) is rolled back on every shard, and
// vtgate's session is then outside any transaction (vitess.go).
//
// So on a Galera node and behind vtgate every transaction idem begins is
// guarded:
//
//   - its connection runs with autocommit off while it lasts, so a statement
//     after an unseen abort opens a new transaction instead of committing
//     on its own, and nothing it writes stays unless idem commits it;
//   - it sets a savepoint right after BEGIN, and COMMIT is sent only after
//     RELEASE SAVEPOINT succeeds: savepoints belong to their transaction,
//     so in the new one it fails with 1305, and idem rolls back and
//     reports errAbortedUnseen (ErrSerialization: Do and lease mode retry,
//     and the retry replays). The check and COMMIT are two text statements
//     in a row (COM_QUERY, each answered), so an abort between them is
//     reported by COMMIT itself.
//
// Complete needs no check of its own: after an unseen abort the claim's row
// is gone, so the completion finds nothing to complete (ErrNotClaimed, the
// new transaction rolled back), or it matches another pending record of the
// request and the COMMIT check refuses it. (It cannot ask whether the
// savepoint is still there without RELEASE, which would also drop every
// savepoint set after it.)
//
// A claim in a caller's transaction (Store.Claim) is guarded only when the
// transaction is one Begin started, ended with that Tx's Commit or Rollback:
// its session has autocommit off and @idem_guarded set, which the claim
// reads (one statement). On a Galera node a claim in any other transaction
// is refused with ErrInvalidConfig before it writes: idem could check
// nothing of it, and an abort before the claim or after Complete would let
// the caller's COMMIT of a part, or of nothing, succeed.

// txSavepoint is the savepoint Begin sets.
const txSavepoint = "idem_tx"

// erSPDoesNotExist: RELEASE or ROLLBACK TO a savepoint the transaction does
// not have.
const erSPDoesNotExist = 1305

// errAbortedUnseen: the Galera node (or vtgate) rolled the transaction back
// and no statement reported it, or the function swallowed the report; found at COMMIT (its savepoint is gone). Nothing
// of it is committed; a retry claims again, and replays or does the work.
var errAbortedUnseen = errors.New("mysql: the transaction was rolled back without any statement reporting it (its savepoint is gone)")

// guardSetup turns autocommit off on a transaction's own connection before
// BEGIN, and marks the session guarded (@idem_guarded, for a claim in the
// caller's statements, which Wrap cannot tell apart); once the transaction
// has ended it undoes both. A connection that cannot be set back is
// discarded, never returned to the pool with autocommit off.
func guardSetup(ctx context.Context, conn *sql.Conn) (func(), error) {
	if _, err := conn.ExecContext(ctx, "SET autocommit = 0, @idem_guarded = 1"); err != nil {
		return nil, err
	}
	return func() {
		// Bounded, and on a context of its own: the caller's may have ended.
		rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		// ROLLBACK first: SET autocommit = 1 commits an open transaction,
		// and when the transaction's context ended, database/sql's own
		// ROLLBACK may not have been sent yet. After a COMMIT it does
		// nothing.
		for _, stmt := range []string{"ROLLBACK", "SET autocommit = 1, @idem_guarded = NULL"} {
			if _, err := conn.ExecContext(rctx, stmt); err != nil {
				_ = conn.Raw(func(any) error { return driver.ErrBadConn })
				return
			}
		}
	}, nil
}

// guardedTx is a transaction idem began on a Galera node or behind vtgate:
// its Commit first checks that the transaction BEGIN started is still the
// session's.
type guardedTx struct {
	*dialect.SQLTx
	vitess bool // behind vtgate
}

// Rollback rolls back. Behind vtgate a tablet may have ended the
// transaction before (a claim's query timeout kills its connection, the
// transaction killer ends an old one), and vtgate answers the ROLLBACK with
// 1317, "transaction …: ended at … (reason)": nothing of it is kept, which
// is what a rollback promises, so that is no error, unless the reason says
// the transaction committed.
func (t guardedTx) Rollback(ctx context.Context) error {
	err := t.SQLTx.Rollback(ctx)
	if t.vitess && endedByTablet(err) {
		return nil
	}
	return err
}

// endedByTablet reports vtgate's answer for a transaction a tablet has
// already ended.
func endedByTablet(err error) bool {
	var me *mysqldriver.MySQLError
	return errors.As(err, &me) && me.Number == erQueryInterrupted && strings.Contains(me.Message, ": ended at ") &&
		!strings.Contains(me.Message, "(transaction committed)")
}

// Commit releases the savepoint Begin set, then commits. When the savepoint
// is gone the node rolled the transaction back unreported: what the session
// ran since is rolled back too, and the error is errAbortedUnseen.
func (t guardedTx) Commit(ctx context.Context) error {
	if err := releaseSavepoint(ctx, t.SQLTx, txSavepoint); err != nil {
		_ = t.SQLTx.Rollback(ctx)
		if errors.Is(err, errAbortedUnseen) {
			return dialect.Classified(dialect.ErrSerialization, err)
		}
		return fmt.Errorf("mysql: check before COMMIT (COMMIT not sent): %w", err)
	}
	return t.SQLTx.Commit(ctx)
}

// setSavepoint sets the named savepoint in q's transaction.
func setSavepoint(ctx context.Context, q dialect.Queryer, name string) error {
	_, err := q.Exec(ctx, "SAVEPOINT "+name)
	return err
}

// releaseSavepoint releases the named savepoint: an error wrapping
// errAbortedUnseen when the session's transaction no longer has it.
func releaseSavepoint(ctx context.Context, q dialect.Queryer, name string) error {
	_, err := q.Exec(ctx, "RELEASE SAVEPOINT "+name)
	if isNumber(err, erSPDoesNotExist) {
		return fmt.Errorf("%w: %w", errAbortedUnseen, err)
	}
	return err
}

// errUnguardedClaim refuses a claim on a Galera node or behind vtgate in a
// transaction Begin did not start.
var errUnguardedClaim = fmt.Errorf("mysql: %w: on a Galera node or behind vtgate a claim in your own transaction needs one the Driver's Begin started "+
	"(use its Native for your statements and end it with its Commit or Rollback): a transaction the node aborts without telling "+
	"would otherwise let your writes commit on their own", dialect.ErrInvalidConfig)

// checkCallerClaim refuses, on a Galera node or behind vtgate, a claim in a
// caller's transaction that Begin did not start: its session must run with
// autocommit off and be marked by guardSetup.
func checkCallerClaim(ctx context.Context, q dialect.Queryer) error {
	ok, err := queryInt64(ctx, q, "SELECT @@autocommit = 0 AND @idem_guarded <=> 1")
	if err != nil {
		return err
	}
	if ok != 1 {
		return errUnguardedClaim
	}
	return nil
}

// inTransaction reports whether q is a transaction idem began (dialect.Tx
// and its wrappers, tracers and fault injectors, have Commit); a caller's
// transaction (Wrap) and the pool have not.
func inTransaction(q dialect.Queryer) bool {
	_, ok := q.(interface{ Commit(context.Context) error })
	return ok
}
