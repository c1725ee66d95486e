package sqlite

import (
	"errors"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/idemkit/idem/dialect"
)

// Classify maps SQLite's extended result codes to the dialect meanings.
func (*sqliteDialect) Classify(err error) error {
	if err == nil || dialect.IsClassified(err) {
		return err
	}
	var se *sqlite.Error
	if !errors.As(err, &se) {
		return err
	}
	code := se.Code()
	switch code {
	case sqlite3.SQLITE_BUSY_SNAPSHOT:
		// A deferred transaction read an older snapshot than the one it
		// must write on: only a retry of the whole transaction helps.
		return dialect.Classified(dialect.ErrSerialization, err)
	case sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY, sqlite3.SQLITE_CONSTRAINT_UNIQUE:
		return dialect.Classified(dialect.ErrUniqueViolation, err)
	}
	switch code & 0xff {
	case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED:
		return dialect.Classified(dialect.ErrLockTimeout, err)
	case sqlite3.SQLITE_READONLY:
		return dialect.Classified(dialect.ErrReadOnly, err)
	case sqlite3.SQLITE_TOOBIG:
		return dialect.Classified(dialect.ErrTooLarge, err)
	}
	return err
}
