package main

import (
	"context"
	"flag"
	"fmt"
	"strings"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/dialect"
	"github.com/idemkit/idem/migrationfiles"
	"github.com/idemkit/idem/mysql"
	"github.com/idemkit/idem/postgres"
	"github.com/idemkit/idem/sqlite"
)

// dialects are the backends migration-files writes for, by name.
var dialects = map[string]func() dialect.Dialect{
	"sqlite":   func() dialect.Dialect { return sqlite.NewDialect() },
	"postgres": func() dialect.Dialect { return postgres.NewDialect() },
	"mysql":    func() dialect.Dialect { return mysql.NewDialect() },
}

var filesCommand = command{
	name:    "migration-files",
	summary: "write idem's schema as golang-migrate or goose files",
	usage: `migration-files -format golang-migrate|goose -dialect sqlite|postgres|mysql [-table NAME] -dir DIR [-json]

Writes idem's versioned schema for a table as migration files of
golang-migrate (NNNN_name.up.sql and .down.sql) or goose (NNNNN_name.sql with
Up and Down sections), from the same migrations Store.Migrate applies. Each up
file also records its version in <table>_schema, as Store.Migrate does, so
Store.Migrate and idem status agree with the tool; each down file removes it.
Keep the files in a directory of their own with the tool's own version table
(golang-migrate: x-migrations-table; goose: -table), or renumber them into
your sequence. golang-migrate on MySQL needs multiStatements=true. Needs no
database.`,
	flags: func(fs *flag.FlagSet, _ *env) func(context.Context, *env) error {
		format := fs.String("format", "", "golang-migrate or goose (required)")
		name := fs.String("dialect", "", "sqlite, postgres or mysql (MySQL and MariaDB) (required)")
		table := fs.String("table", idem.DefaultTable, "the idem table the files create")
		dir := fs.String("dir", "", "the directory to write them in, created if missing (required)")
		return func(ctx context.Context, e *env) error {
			newDialect, ok := dialects[*name]
			if !ok {
				return usageError(fmt.Sprintf("-dialect %q: want sqlite, postgres or mysql", *name))
			}
			if *format == "" || *dir == "" {
				return usageError("-format and -dir are required")
			}
			files, err := migrationfiles.Render(newDialect(), *table, migrationfiles.Format(*format))
			if err != nil {
				return err
			}
			if err := migrationfiles.Write(*dir, files); err != nil {
				return err
			}
			var names []string
			for _, f := range files {
				names = append(names, f.Name)
			}
			if e.json {
				return writeJSON(e.stdout, map[string]any{"dir": *dir, "files": names})
			}
			fmt.Fprintf(e.stdout, "wrote %s to %s\n", strings.Join(names, ", "), *dir)
			return nil
		}
	},
}
