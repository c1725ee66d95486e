package mysql

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
)

// serverVariables reads the session's values of the named server variables,
// keyed by lower-case name. A variable the server does not have is absent:
// New asks for some that exist only on MariaDB, or only with Galera.
func serverVariables(ctx context.Context, db *sql.DB, names ...string) (map[string]string, error) {
	quoted := make([]string, len(names))
	for i, n := range names {
		quoted[i] = "'" + n + "'"
	}
	rows, err := db.QueryContext(ctx, "SHOW VARIABLES WHERE Variable_name IN ("+strings.Join(quoted, ", ")+")") //nolint:gosec // names are constants of this package
	if err != nil {
		return nil, fmt.Errorf("mysql: read server variables: %w", err)
	}
	defer rows.Close()
	vars := map[string]string{}
	for rows.Next() {
		var name, value string
		if err := rows.Scan(&name, &value); err != nil {
			return nil, fmt.Errorf("mysql: read server variables: %w", err)
		}
		vars[strings.ToLower(name)] = value
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("mysql: read server variables: %w", err)
	}
	return vars, nil
}
