package postgres

import (
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemkit/idem/dialect"
)

// A transaction in which a statement failed refuses every later statement
// but its end (SQLSTATE 25P02). In the transactions Do and DoLease begin on
// database/sql, idem's own statements after such a failure (the completion,
// a read-back) are not sent: the connection's last ReadyForQuery said the
// transaction failed ('E'), so the answer is known. Sending them anyway
// costs a round trip, and behind PgBouncer 1.21 or later with
// max_prepared_statements it cost the connection: pgx's single-statement
// path prepares the statement first, the server refuses that Parse,
// PgBouncer records the statement as the client's all the same, pgx does
// not, and the client's next Parse of it makes PgBouncer end the session
// ("prepared statement name is already in use", FATAL 08P01), which looked
// like a lost connection and made Do run the function again
// (integration/pgbouncer's TestFailedStatementKeepsConnection). The pgx
// Driver and HoldBegin send the completion in a batch with COMMIT, and pgx
// forgets a statement whose Parse failed in a batch: not hit (the same
// test). Store.Claim on the caller's pgx.Tx (Wrap) is checked like
// database/sql's; on the caller's *sql.Tx idem cannot see the connection's
// status, and its statements are sent as before.

// failedTxStatus is the transaction status of a ReadyForQuery after a
// failed statement inside a transaction block.
const failedTxStatus = 'E'

// errTxFailed is what idem's statement gets instead of being sent: the
// server's own answer, classified ErrTxAborted.
var errTxFailed = dialect.Classified(dialect.ErrTxAborted, &pgconn.PgError{
	Severity: "ERROR", SeverityUnlocalized: "ERROR", Code: inFailedTransaction,
	Message: "current transaction is aborted, commands ignored until end of transaction block (not sent: a statement of the transaction had failed)",
})

// failed reports errTxFailed when conn's transaction has failed.
func failed(conn *pgconn.PgConn) error {
	if conn.TxStatus() == failedTxStatus {
		return errTxFailed
	}
	return nil
}
