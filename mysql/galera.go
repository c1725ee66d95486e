package mysql

import (
	"context"
	"errors"
	"strings"

	"github.com/idemkit/idem/dialect"
)

// On a MariaDB Galera cluster every node takes writes, and a node applies
// the write sets other nodes committed a moment after they were ordered. A
// plain read there can miss a record another node has just committed: a
// Lookup would report "not found" for a key whose request completed. So on
// Galera the dialect's lookups are causal reads (wsrep_sync_wait=1 for that
// statement only): the node first applies everything the cluster ordered
// before the read.
//
// The claim cannot wait that way: it runs inside a transaction, and the
// server skips causal waits for statements of an open transaction, whatever
// wsrep_sync_wait says (only START TRANSACTION waits, under bit 1). So a
// claim on a node that has not yet applied another node's committed record
// of the key finds no record and wins there. That win never commits: the
// node's applier, meeting the claimed row, aborts the transaction, or
// certification refuses its write set at COMMIT (it conflicts with the
// earlier one on the key). Either way the claim, a later statement or the
// COMMIT fails with 1213 (ErrDeadlock); Do retries, and the retry replays.
// Capabilities.ConflictsAtCommit tells the conformance suite. A loser's
// locking read runs only after its INSERT met the record on this node.
//
// Not always, though: the history check saw the abort reported to no
// statement (about once in six runs of 300 operations). The session's later
// statements then ran outside the rolled-back transaction, the claim's
// read-back returned the other node's record and the empty COMMIT
// succeeded. So on MariaDB Galera a read inside a transaction ends by
// checking that the session still runs one (stillInTransaction;
// @@in_transaction is MariaDB's: Percona XtraDB Cluster goes unchecked).
// Only transactions idem began have Commit, and only a lease claim reads
// inside one, so only lease claims are checked: Do's and Store.Claim's
// claims, the token stamp before the read-back, and a stale holder's
// fenced writes with a function are not, and the check leaves a window
// before COMMIT (the README's Galera section says what that can cost).

// causalPrefix makes one statement a causal read on Galera.
const causalPrefix = "SET STATEMENT wsrep_sync_wait=1 FOR "

// causalReadError: a lookup takes no lock, so its 1205 (lock wait timeout)
// is the causal wait giving up: the node is out of the primary component,
// or could not catch up within repl.causal_read_timeout. Another node may
// answer: ErrUnavailable.
func causalReadError(err error) error {
	if isNumber(err, erLockWaitTimeout) {
		return dialect.Classified(dialect.ErrUnavailable, err)
	}
	return err
}

// galeraNode reports, from the server's variables, whether the session runs
// on a Galera cluster node: wsrep_on, with a provider loaded.
func galeraNode(vars map[string]string) bool {
	provider := strings.ToLower(vars["wsrep_provider"])
	return strings.EqualFold(vars["wsrep_on"], "ON") && provider != "" && provider != "none"
}

// errAbortedUnseen: the node's applier aborted the transaction (another
// node's write set met its rows) and no statement reported it. A claim that
// read its record back then saw another node's record from outside its
// rolled-back transaction, and its COMMIT of nothing would succeed: a lease
// claim won over a record that was not its own. A retry claims again.
var errAbortedUnseen = dialect.Classified(dialect.ErrSerialization,
	errors.New("mysql: the Galera node aborted the transaction unreported (@@in_transaction is 0)"))

// stillInTransaction fails with errAbortedUnseen when the session no longer
// runs a transaction: the check a read inside a claim's transaction ends
// with on a Galera node.
func stillInTransaction(ctx context.Context, q dialect.Queryer) error {
	in, err := queryInt64(ctx, q, "SELECT @@in_transaction")
	if err != nil {
		return err
	}
	if in != 1 {
		return errAbortedUnseen
	}
	return nil
}

// inTransaction reports whether q runs statements inside a transaction:
// dialect.Tx and its wrappers (tracers, fault injectors) have Commit, a
// pool has not.
func inTransaction(q dialect.Queryer) bool {
	_, ok := q.(interface{ Commit(context.Context) error })
	return ok
}
