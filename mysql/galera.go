package mysql

import (
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
// Not always, though: the node can also roll a transaction back without
// any statement reporting it; guard.go says how idem's transactions are
// kept from committing anything after that.

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
