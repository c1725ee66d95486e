// Package migrationfiles writes idem's versioned schema as migration files
// for the tools teams already run: golang-migrate (N_name.up.sql and
// N_name.down.sql) and pressly/goose (one annotated file per version). The
// files come from the same source as Store.Migrate: each backend's embedded
// migrations (dialect.Schema), rendered for a table name, with the down
// migrations written beside them.
//
// # How the versions relate
//
// Every up file also records its version in the table's own version table,
// <table>_schema, exactly as Store.Migrate does (and does nothing there if
// the version is already recorded); every down file removes that record
// (the first version's drops the version table). So a table migrated by a
// tool is one Store.Migrate recognises: Store.Migrate finds nothing to do,
// Store.Version reports the version the tool applied, and a binary older
// than the tool's files refuses to run on it (idem.ErrSchemaNewer). The
// tool keeps its own bookkeeping as well (schema_migrations,
// goose_db_version): give it a table of its own per idem table
// (golang-migrate's x-migrations-table, goose.WithTableName) when idem's
// files live in a directory of their own, or renumber the files into your
// sequence — the version idem records is inside each file, not in its name.
//
// Files for the default table are checked in and embedded (Embedded); for
// another table, call Render, or run
//
//	go run github.com/idemkit/idem/cmd/idem migration-files -format goose -dialect postgres -table my_keys -dir db/idem
package migrationfiles

import (
	"embed"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/idemkit/idem/dialect"
)

// Format is a migration tool's file layout.
type Format string

const (
	// GolangMigrate is github.com/golang-migrate/migrate's layout: for
	// each version, NNNN_name.up.sql and NNNN_name.down.sql. On MySQL its
	// driver needs a connection with multiStatements=true.
	GolangMigrate Format = "golang-migrate"
	// Goose is github.com/pressly/goose's layout: for each version one
	// file, NNNNN_name.sql, with "-- +goose Up" and "-- +goose Down"
	// sections.
	Goose Format = "goose"
)

// Formats lists every Format.
func Formats() []Format { return []Format{GolangMigrate, Goose} }

// Embedded holds the files for the default table, idempotency_keys:
// golang-migrate/<backend>/ and goose/<backend>/, backend being sqlite,
// postgres or mysql. Hand a directory to the tool with fs.Sub:
//
//	dir, _ := fs.Sub(migrationfiles.Embedded, "goose/postgres")
//	provider, err := goose.NewProvider(goose.DialectPostgres, db, dir)
//
//go:embed golang-migrate goose
var Embedded embed.FS

// File is one migration file.
type File struct {
	// Name is the file's name, without a directory.
	Name string
	// Data is its content.
	Data []byte
}

// Render returns the files of format f for table (a name NewTable accepts)
// on the database of d, oldest version first. d must be a dialect.Scripter
// (every backend in this module is), and each of its migrations must have
// down statements.
func Render(d dialect.Dialect, table string, f Format) ([]File, error) {
	t, err := dialect.NewTable(table)
	if err != nil {
		return nil, fmt.Errorf("migrationfiles: %w", err)
	}
	s, ok := d.(dialect.Scripter)
	if !ok {
		return nil, fmt.Errorf("migrationfiles: %s: %w: the dialect is not a dialect.Scripter", d.Name(), errors.ErrUnsupported)
	}
	schema := d.Schema(t)
	var out []File
	for _, m := range schema.Migrations {
		if !plainName(m.Name) {
			return nil, fmt.Errorf("migrationfiles: %s migration %d: name %q is not lower-case letters, digits and '_'", d.Name(), m.Version, m.Name)
		}
		if len(m.Down) == 0 {
			return nil, fmt.Errorf("migrationfiles: %s migration %d (%s) has no down statements: add migrations/%04d_%s.down.sql to the backend",
				d.Name(), m.Version, m.Name, m.Version, m.Name)
		}
		up := append([]string{schema.CreateVersionTable}, m.Statements...)
		up = append(up, s.RecordVersionSQL(t, m))
		down := append([]string(nil), m.Down...)
		if m.Version == 1 {
			down = append(down, s.DropVersionTableSQL(t))
		} else {
			down = append(down, s.ForgetVersionSQL(t, m))
		}
		head := header(d.Name(), t, m, f)
		switch f {
		case GolangMigrate:
			base := fmt.Sprintf("%04d_%s", m.Version, m.Name)
			out = append(out,
				File{Name: base + ".up.sql", Data: []byte(head + script(up))},
				File{Name: base + ".down.sql", Data: []byte(head + script(down))})
		case Goose:
			out = append(out, File{
				Name: fmt.Sprintf("%05d_%s.sql", m.Version, m.Name),
				Data: []byte(head + "-- +goose Up\n" + script(up) + "\n-- +goose Down\n" + script(down)),
			})
		default:
			return nil, fmt.Errorf("migrationfiles: %w: unknown format %q (known: %v)", dialect.ErrInvalidConfig, f, Formats())
		}
	}
	return out, nil
}

// header says where a file comes from and what it records.
func header(backend string, t dialect.Table, m dialect.Migration, f Format) string {
	return fmt.Sprintf(`-- idem schema version %d (%s) of table %s on %s, for %s.
-- Generated from the backend's migrations; do not edit. Regenerate with
--   go run github.com/idemkit/idem/cmd/idem migration-files -format %s -dialect %s -table %s -dir DIR
-- Up records version %d in %s, as Store.Migrate does; down removes it.

`, m.Version, m.Name, t.Name(), backend, f, f, backend, t.Name(), m.Version, t.Index("schema"))
}

// script writes statements one after another, each ended by ';'.
func script(stmts []string) string {
	var b strings.Builder
	for i, s := range stmts {
		if i > 0 {
			b.WriteString("\n")
		}
		b.WriteString(s)
		b.WriteString(";\n")
	}
	return b.String()
}

func plainName(s string) bool {
	for _, c := range s {
		if (c < 'a' || c > 'z') && (c < '0' || c > '9') && c != '_' {
			return false
		}
	}
	return s != ""
}

// Write writes files into dir, creating it if needed and replacing files of
// the same names.
func Write(dir string, files []File) error {
	if err := os.MkdirAll(dir, 0o755); err != nil { //nolint:gosec // migration files go into the user's repository, readable like its source
		return fmt.Errorf("migrationfiles: %w", err)
	}
	for _, f := range files {
		if err := os.WriteFile(filepath.Join(dir, f.Name), f.Data, 0o644); err != nil { //nolint:gosec // as above
			return fmt.Errorf("migrationfiles: %w", err)
		}
	}
	return nil
}
