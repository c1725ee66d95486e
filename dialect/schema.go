package dialect

import (
	"context"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"
	"text/template"
)

// Schema is a table's versioned DDL and the statements that keep its
// version, for Store.Migrate. The core runs it in one transaction it begins
// (at READ COMMITTED where the database has levels): Lock, Prepare, then
// CreateVersionTable, ReadVersion, every pending migration followed by
// RecordVersion, then Settle, Unlock and COMMIT. It refuses a database whose
// version is newer than the last migration.
type Schema struct {
	// Migrations are the schema's steps, oldest first: Migrations[i] has
	// Version i+1.
	Migrations []Migration
	// Lock, when set, takes a lock that serialises migrations of this table
	// across processes: a query returning one row whose single column is 1
	// when the lock was taken (anything else fails the migration). The lock
	// ends with the transaction, or with Unlock.
	Lock string
	// Unlock, when set, releases a lock that outlives transactions (a
	// session lock, MySQL's GET_LOCK). It runs before COMMIT, and after a
	// failure.
	Unlock string
	// Prepare, when not nil, runs in Migrate and Version after Lock and
	// before CreateVersionTable, on the migration's transaction: what the
	// database needs before the tables' DDL, and which SQL cannot say
	// idempotently (on a sharded Vitess keyspace, the VSchema that routes
	// the tables). It must leave things as they are when run again.
	// Migration tools (migrationfiles) do not run it: the backend documents
	// what to apply first.
	Prepare func(ctx context.Context, q Queryer) error
	// Settle, when not nil, runs in Migrate after the pending migrations
	// and before Unlock: it returns once the database serves the schema
	// just applied (Vitess's vtgate learns the columns an ALTER TABLE added
	// from its tablets a moment after the DDL, and refuses them until
	// then), or fails when ctx ends or its own bound passes.
	Settle func(ctx context.Context, q Queryer) error
	// CreateVersionTable creates the table of applied versions if it does
	// not exist.
	CreateVersionTable string
	// ReadVersion returns one row with the highest applied version, NULL
	// (or no row) when none was applied.
	ReadVersion string
	// RecordVersion records one applied migration; its arguments are the
	// version (int) and the name (string).
	RecordVersion string
}

// Migration is one versioned step of a schema.
type Migration struct {
	// Version counts from 1 without gaps.
	Version int
	// Name says what the step does ("create_table").
	Name string
	// Statements run in order, in the migration transaction. On a database
	// whose DDL commits on its own (MySQL, MariaDB), each statement commits
	// by itself: give such a migration one atomic statement (one ALTER
	// TABLE), so that it is applied wholly or not at all.
	Statements []string
	// Down undoes Statements, for migration tools that migrate down
	// (golang-migrate, goose); nil when the migration has no down file.
	// Store.Migrate never runs it.
	Down []string
	// Applied, when set, is a query that returns a row when the step's
	// effect is already in place although its version was not recorded:
	// on a database whose DDL commits on its own, a crash between the DDL
	// and the version's record leaves it so. Store.Migrate then records the
	// version without running Statements again. A step whose statements
	// are all safe to run twice (IF NOT EXISTS) needs none.
	Applied string
}

// LoadMigrations reads the migrations of table t from the files of dir in
// fsys named NNNN_name.sql (NNNN the version, from 1, without gaps; name
// the migration's name). Each file is a text/template over t: {{.Name}} is
// the table's name and {{.Index "suffix"}} a name derived from it. A line
// whose last non-blank character is ';' ends a statement. A file
// NNNN_name.down.sql beside it, when there is one, holds the statements
// that undo it (Migration.Down): migration tools run them; Store.Migrate
// never does. A file NNNN_name.applied.sql holds one query, the step's
// Migration.Applied.
func LoadMigrations(fsys fs.FS, dir string, t Table) ([]Migration, error) {
	entries, err := fs.ReadDir(fsys, dir)
	if err != nil {
		return nil, fmt.Errorf("dialect: migrations: %w", err)
	}
	var out []Migration
	downs := map[string][]string{} // "NNNN_name" -> statements
	applied := map[string]string{} // "NNNN_name" -> query
	bases := map[int]string{}      // version -> "NNNN_name"
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".sql") {
			continue
		}
		if base, ok := strings.CutSuffix(name, ".down.sql"); ok {
			stmts, err := renderMigration(fsys, dir, name, t)
			if err != nil {
				return nil, err
			}
			downs[base] = stmts
			continue
		}
		if base, ok := strings.CutSuffix(name, ".applied.sql"); ok {
			stmts, err := renderMigration(fsys, dir, name, t)
			if err != nil {
				return nil, err
			}
			if len(stmts) != 1 {
				return nil, fmt.Errorf("dialect: migration file %s: want one query, found %d statements", name, len(stmts))
			}
			applied[base] = stmts[0]
			continue
		}
		num, rest, ok := strings.Cut(strings.TrimSuffix(name, ".sql"), "_")
		version, err := strconv.Atoi(num)
		if !ok || err != nil || version < 1 || rest == "" {
			return nil, fmt.Errorf("dialect: migration file %s: want NNNN_name.sql", name)
		}
		stmts, err := renderMigration(fsys, dir, name, t)
		if err != nil {
			return nil, err
		}
		out = append(out, Migration{Version: version, Name: rest, Statements: stmts})
		bases[version] = strings.TrimSuffix(name, ".sql")
	}
	slices.SortFunc(out, func(a, b Migration) int { return a.Version - b.Version })
	for i := range out {
		base := bases[out[i].Version]
		if down, ok := downs[base]; ok {
			out[i].Down = down
			delete(downs, base)
		}
		if q, ok := applied[base]; ok {
			out[i].Applied = q
			delete(applied, base)
		}
	}
	for base := range downs {
		return nil, fmt.Errorf("dialect: migration %s.down.sql undoes no migration", base)
	}
	for base := range applied {
		return nil, fmt.Errorf("dialect: migration %s.applied.sql checks no migration", base)
	}
	for i, m := range out {
		if m.Version != i+1 {
			return nil, fmt.Errorf("dialect: migrations: version %d is missing (found %d)", i+1, m.Version)
		}
		if len(m.Statements) == 0 {
			return nil, fmt.Errorf("dialect: migration %d_%s has no statement", m.Version, m.Name)
		}
	}
	return out, nil
}

// renderMigration reads one migration file and renders it for t.
func renderMigration(fsys fs.FS, dir, name string, t Table) ([]string, error) {
	text, err := fs.ReadFile(fsys, path.Join(dir, name))
	if err != nil {
		return nil, fmt.Errorf("dialect: migration %s: %w", name, err)
	}
	tmpl, err := template.New(name).Option("missingkey=error").Parse(string(text))
	if err != nil {
		return nil, fmt.Errorf("dialect: migration %s: %w", name, err)
	}
	var b strings.Builder
	if err := tmpl.Execute(&b, t); err != nil {
		return nil, fmt.Errorf("dialect: migration %s: %w", name, err)
	}
	return splitStatements(b.String()), nil
}

// MustLoadMigrations is LoadMigrations for migrations embedded in the
// backend's own package (go:embed), where a malformed file is a mistake in
// the build: it panics. Load them in a test of your package, so the panic
// never reaches a user.
func MustLoadMigrations(fsys fs.FS, dir string, t Table) []Migration {
	ms, err := LoadMigrations(fsys, dir, t)
	if err != nil {
		panic(err)
	}
	return ms
}

// splitStatements cuts SQL text at lines that end with ';', dropping the
// ';', comment-only lines and blank statements.
func splitStatements(text string) []string {
	var (
		out []string
		cur strings.Builder
	)
	flush := func() {
		if s := strings.TrimSpace(cur.String()); s != "" {
			out = append(out, s)
		}
		cur.Reset()
	}
	for line := range strings.Lines(text) {
		trimmed := strings.TrimSpace(line)
		if strings.HasPrefix(trimmed, "--") && cur.Len() == 0 {
			continue
		}
		if strings.HasSuffix(trimmed, ";") {
			cur.WriteString(strings.TrimSuffix(strings.TrimRight(line, " \t\r\n"), ";"))
			flush()
			continue
		}
		cur.WriteString(line)
	}
	flush()
	return out
}
