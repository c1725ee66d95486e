package mysql

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"database/sql/driver"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/idemkit/idem/dialect"
)

// A Galera node can roll a transaction back without telling any statement:
// its applier aborts a local transaction whose rows another node's write set
// needs (a brute-force abort), and the next command of the session is told
// with 1213, unless that command is one MariaDB lets through without an
// answer (COM_STMT_CLOSE, which go-sql-driver sends after every statement it
// prepared: dispatch_command in MariaDB's sql_parse.cc). The history check
// saw it about once in six runs of 300 operations. After such an abort the
// session is outside any transaction: with autocommit on, every later
// statement commits on its own (a function's writes stay, though its claim
// was rolled back and another node's request did the work) and the COMMIT
// of nothing succeeds.
//
// So on a Galera node every transaction idem begins is guarded:
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
//   - Complete checks the savepoint too when it finds no claim to
//     complete: then the transaction ended before it, and the error is
//     ErrTxAborted, as on PostgreSQL after a failed statement (Do returns
//     the function's 4xx unstored, any other answer as an error; nothing
//     was kept).
//
// A claim in a caller's transaction (Store.Claim) cannot be guarded by idem:
// on a Galera node it needs autocommit off on that session, and refuses
// otherwise with ErrInvalidConfig. Begin the transaction with Driver.Begin
// and end it with that Tx's Commit or Rollback (not through Native, which
// would skip the check and keep the connection); a connection of your own
// with SET autocommit = 0 works too, if you set it back (or discard the
// connection) before it returns to the pool. The claim sets a savepoint of
// its own, which Complete checks after storing the response (ErrTxAborted
// when it is gone).

// txSavepoint is the savepoint Begin sets; a claim in a caller's
// transaction sets claimSavepoint's.
const txSavepoint = "idem_tx"

// claimSavepoint names the savepoint of a claim of scope and key in a
// caller's transaction: a name of its own per key, so that after an unseen
// abort a claim of another key in the new transaction cannot set the name
// an earlier claim's Complete checks.
func claimSavepoint(scope, key string) string {
	sum := sha256.Sum256([]byte(scope + "\x00" + key))
	return "idem_claim_" + hex.EncodeToString(sum[:8])
}

// erSPDoesNotExist: RELEASE or ROLLBACK TO a savepoint the transaction does
// not have.
const erSPDoesNotExist = 1305

// errAbortedUnseen: the Galera node rolled the transaction back and no
// statement reported it; found at COMMIT (its savepoint is gone). Nothing
// of it is committed; a retry claims again, and replays or does the work.
var errAbortedUnseen = errors.New("mysql: the transaction was rolled back without any statement reporting it (its savepoint is gone)")

// guardSetup turns autocommit off on a transaction's own connection before
// BEGIN, and back on once the transaction has ended; a connection that
// cannot be set back is discarded, never returned to the pool with
// autocommit off.
func guardSetup(ctx context.Context, conn *sql.Conn) (func(), error) {
	if _, err := conn.ExecContext(ctx, "SET autocommit = 0"); err != nil {
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
		for _, stmt := range []string{"ROLLBACK", "SET autocommit = 1"} {
			if _, err := conn.ExecContext(rctx, stmt); err != nil {
				_ = conn.Raw(func(any) error { return driver.ErrBadConn })
				return
			}
		}
	}, nil
}

// guardedTx is a transaction idem began on a Galera node: its Commit first
// checks that the transaction BEGIN started is still the session's.
type guardedTx struct {
	*dialect.SQLTx
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

// checkSavepoint fails when the session's transaction no longer has the
// named savepoint, as ErrTxAborted: the transaction ended before the
// statement that found it, whether a statement reported that (a deadlock
// the caller's code handled) or none did; nothing of it is kept. Otherwise
// it leaves the savepoint set, for a later check.
func checkSavepoint(ctx context.Context, q dialect.Queryer, name string) error {
	if err := releaseSavepoint(ctx, q, name); err != nil {
		if errors.Is(err, errAbortedUnseen) {
			return dialect.Classified(dialect.ErrTxAborted, err)
		}
		return err
	}
	return setSavepoint(ctx, q, name)
}

// guardCallerClaim prepares a claim of scope and key in a caller's
// transaction on a Galera node: the session must run with autocommit off,
// and the claim's savepoint is set before its first write.
func guardCallerClaim(ctx context.Context, q dialect.Queryer, scope, key string) error {
	on, err := queryInt64(ctx, q, "SELECT @@autocommit")
	if err != nil {
		return err
	}
	if on != 0 {
		return fmt.Errorf("mysql: %w: on a Galera node a claim in your own transaction needs autocommit off on its session "+
			"(begin the transaction with the Driver's Begin and end it with that transaction's Commit or Rollback): "+
			"a transaction the node aborts without telling would let your writes commit on their own", dialect.ErrInvalidConfig)
	}
	return setSavepoint(ctx, q, claimSavepoint(scope, key))
}

// inTransaction reports whether q is a transaction idem began (dialect.Tx
// and its wrappers, tracers and fault injectors, have Commit); a caller's
// transaction (Wrap) and the pool have not.
func inTransaction(q dialect.Queryer) bool {
	_, ok := q.(interface{ Commit(context.Context) error })
	return ok
}
