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
// before the read. The claim needs no wait: its INSERT is certified against
// every write set ordered before it (a conflict is error 1213 at COMMIT, and
// Do retries), and its locking read runs only after the INSERT met the
// record on this node.

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
