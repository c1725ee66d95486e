package idem

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/idemkit/idem/dialect"
)

// migrateWait bounds how long Migrate waits to begin (SQLite: for the write
// lock) and for another process's migration of the same table.
const migrateWait = time.Minute

// SchemaVersion is where a store's table stands.
type SchemaVersion struct {
	// Current is the version applied in the database; 0 before Migrate.
	Current int
	// Latest is the newest version this code knows.
	Latest int
}

// Migrations returns the store's versioned DDL, rendered for its table,
// oldest first, for migration tools (Migrate applies the same).
func (s *Store[TTx]) Migrations() []dialect.Migration {
	return s.d.Schema(s.table).Migrations
}

// Migrate brings the store's table to the latest schema version: it applies
// the migrations the database has not recorded yet, and records each. It is
// safe to run from several processes at once (the dialect's lock makes
// them take turns) and to run again (it then does nothing). A table created
// before versions were recorded is version 1. It refuses, with
// ErrSchemaNewer, a database whose version is newer than this code's.
func (s *Store[TTx]) Migrate(ctx context.Context) error {
	_, err := s.migrate(ctx, true)
	return err
}

// Version reads the store's schema version and applies nothing. It creates
// the (empty) version table when it is missing, so a database never
// migrated reports version 0.
func (s *Store[TTx]) Version(ctx context.Context) (SchemaVersion, error) {
	return s.migrate(ctx, false)
}

func (s *Store[TTx]) migrate(ctx context.Context, apply bool) (v SchemaVersion, err error) {
	schema := s.d.Schema(s.table)
	v.Latest = len(schema.Migrations)
	fail := func(what string, err error) (SchemaVersion, error) {
		return v, fmt.Errorf("idem: migrate %s on %s: %s: %w", s.table.Name(), s.d.Name(), what, s.d.Classify(err))
	}
	tx, err := s.driver.Begin(ctx, dialect.BeginOptions{Isolation: sql.LevelReadCommitted, WaitBound: migrateWait, Schema: true})
	if err != nil {
		return fail("begin", err)
	}
	committed := false
	defer func() {
		if !committed {
			if schema.Unlock != "" {
				uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
				_, _ = tx.Exec(uctx, schema.Unlock)
				cancel()
			}
			rollback(ctx, tx)
		}
	}()
	if schema.Lock != "" {
		got, err := queryInt(ctx, tx, schema.Lock)
		if err != nil {
			return fail("take the migration lock", err)
		}
		if got != 1 {
			return fail("take the migration lock", errors.New("another migration of this table held it too long"))
		}
	}
	if schema.Prepare != nil {
		if err := schema.Prepare(ctx, tx); err != nil {
			return fail("prepare", err)
		}
	}
	if _, err := tx.Exec(ctx, schema.CreateVersionTable); err != nil {
		return fail("create the version table", err)
	}
	if v.Current, err = queryInt(ctx, tx, schema.ReadVersion); err != nil {
		return fail("read the version", err)
	}
	if v.Current > v.Latest {
		return v, fmt.Errorf("%w: %s is at version %d, this code knows up to %d", ErrSchemaNewer, s.table.Name(), v.Current, v.Latest)
	}
	for _, m := range schema.Migrations[v.Current:] {
		if !apply {
			break
		}
		done := false
		if m.Applied != "" {
			// DDL that committed on its own before a crash kept its
			// version from being recorded: record it now.
			if done, err = queryRow(ctx, tx, m.Applied); err != nil {
				return fail(fmt.Sprintf("check whether migration %d (%s) is in place", m.Version, m.Name), err)
			}
		}
		for _, stmt := range m.Statements {
			if done {
				break
			}
			if _, err := tx.Exec(ctx, stmt); err != nil {
				return fail(fmt.Sprintf("migration %d (%s)", m.Version, m.Name), err)
			}
		}
		if _, err := tx.Exec(ctx, schema.RecordVersion, m.Version, m.Name); err != nil {
			return fail(fmt.Sprintf("record version %d", m.Version), err)
		}
		v.Current = m.Version
	}
	if apply && schema.Settle != nil {
		if err := schema.Settle(ctx, tx); err != nil {
			return fail("wait until the schema is served", err)
		}
	}
	if schema.Unlock != "" {
		if _, err := tx.Exec(ctx, schema.Unlock); err != nil {
			return fail("release the migration lock", err)
		}
	}
	committed = true
	if err := tx.Commit(ctx); err != nil {
		return fail("commit", err)
	}
	return v, nil
}

// queryRow reports whether query returns a row.
func queryRow(ctx context.Context, q dialect.Queryer, query string) (bool, error) {
	var found bool
	err := dialect.Run(ctx, q, dialect.Statement{SQL: query, Rows: func(r dialect.Rows) error {
		found = r.Next()
		return r.Err()
	}})
	return found, err
}

// queryInt runs a query returning one row with one integer column, or NULL
// (0), or no row (0).
func queryInt(ctx context.Context, q dialect.Queryer, query string) (int, error) {
	var v *int64
	err := dialect.Run(ctx, q, dialect.Statement{SQL: query, Rows: func(r dialect.Rows) error {
		if !r.Next() {
			return r.Err()
		}
		return r.Scan(&v)
	}})
	if err != nil || v == nil {
		return 0, err
	}
	return int(*v), nil
}
