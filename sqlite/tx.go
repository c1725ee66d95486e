package sqlite

import (
	"context"
	"database/sql"

	"github.com/idemkit/idem/dialect"
)

// tx is the transaction Driver.Begin returns: a database/sql transaction
// whose dialect statements run prepared. An in-process database has no
// connection to lose during COMMIT, so every COMMIT error is a known
// failure.
type tx struct {
	*dialect.SQLTx
	prepared txPreparer
}

var (
	_ dialect.Tx[*sql.Tx] = tx{}
	_ dialect.Preparer    = tx{}
)

func newTx(sqlTx *dialect.SQLTx, cache *stmtCache) tx {
	return tx{SQLTx: sqlTx, prepared: txPreparer{Queryer: sqlTx, tx: sqlTx.Native(), cache: cache}}
}

// ExecPrepared runs one of the dialect's statements prepared.
func (t tx) ExecPrepared(ctx context.Context, query string, args ...any) (int64, error) {
	return t.prepared.ExecPrepared(ctx, query, args...)
}

// QueryPrepared runs one of the dialect's queries prepared.
func (t tx) QueryPrepared(ctx context.Context, query string, args ...any) (dialect.Rows, error) {
	return t.prepared.QueryPrepared(ctx, query, args...)
}
