package mysql

import (
	"context"
	"database/sql"
	"fmt"
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

// onGalera reports whether the session runs on a Galera cluster node:
// wsrep_on, with a provider loaded. Servers without Galera have neither
// variable.
func onGalera(ctx context.Context, db *sql.DB) (bool, error) {
	rows, err := db.QueryContext(ctx, "SHOW VARIABLES WHERE Variable_name IN ('wsrep_on', 'wsrep_provider')")
	if err != nil {
		return false, fmt.Errorf("mysql: read wsrep settings: %w", err)
	}
	defer rows.Close()
	vars := map[string]string{}
	for rows.Next() {
		var name, value string
		if err := rows.Scan(&name, &value); err != nil {
			return false, fmt.Errorf("mysql: read wsrep settings: %w", err)
		}
		vars[strings.ToLower(name)] = value
	}
	if err := rows.Err(); err != nil {
		return false, fmt.Errorf("mysql: read wsrep settings: %w", err)
	}
	provider := strings.ToLower(vars["wsrep_provider"])
	return strings.EqualFold(vars["wsrep_on"], "ON") && provider != "" && provider != "none", nil
}
