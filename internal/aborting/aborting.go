// Package aborting gives the adapters' tests, on SQLite, the failure a
// PostgreSQL handler meets when it catches a failed statement and answers:
// the transaction is aborted, so the completion fails with
// dialect.ErrTxAborted.
package aborting

import (
	"context"
	"errors"

	"github.com/idemkit/idem/dialect"
	"github.com/idemkit/idem/sqlite"
)

// Driver is a SQLite driver whose every completion fails as PostgreSQL's
// does in a transaction that a failed statement aborted (SQLSTATE 25P02).
type Driver struct{ *sqlite.Driver }

// Dialect is the SQLite dialect with Complete failing.
func (d Driver) Dialect() dialect.Dialect { return abortedDialect{d.Driver.Dialect()} }

type abortedDialect struct{ dialect.Dialect }

func (abortedDialect) Complete(context.Context, dialect.Queryer, dialect.Table, dialect.CompleteArgs) error {
	return dialect.Classified(dialect.ErrTxAborted, errors.New("test: current transaction is aborted, commands ignored until end of transaction block"))
}
