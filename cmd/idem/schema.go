package main

import (
	"context"
	"flag"
	"fmt"
	"time"

	"github.com/idemkit/idem"
)

var migrateCommand = command{
	name:    "migrate",
	summary: "apply the schema migrations the database lacks",
	usage: `migrate -dsn DSN [-table NAME] [-json]

Brings the table to this binary's schema version, applying and recording each
migration it lacks (Store.Migrate). Safe to run from several places at once and
to run again. It creates a SQLite file that does not exist; every other
command refuses one. A database whose schema is newer than this binary is refused
(exit 6).`,
	needsDB:   true,
	createsDB: true,
	timeout:   5 * time.Minute,
	flags: func(*flag.FlagSet, *env) func(context.Context, *env) error {
		return func(ctx context.Context, e *env) error {
			s := e.target.store
			before, err := s.Version(ctx)
			if err != nil {
				return err
			}
			if err := s.Migrate(ctx); err != nil {
				return err
			}
			after, err := s.Version(ctx)
			if err != nil {
				return err
			}
			if e.json {
				return writeJSON(e.stdout, map[string]any{
					"table": s.Config().Table, "database": e.target.where,
					"from": before.Current, "to": after.Current, "latest": after.Latest,
				})
			}
			if before.Current == after.Current {
				fmt.Fprintf(e.stdout, "%s: schema version %d, up to date\n", s.Config().Table, after.Current)
				return nil
			}
			fmt.Fprintf(e.stdout, "%s: schema version %d -> %d\n", s.Config().Table, before.Current, after.Current)
			return nil
		}
	},
}

var statusCommand = command{
	name:    "status",
	summary: "show the schema version and the records by state",
	usage: `status -dsn DSN [-table NAME] [-prefix SCOPE_PREFIX | -principal P] [-json]

Shows the table's schema version next to this binary's, and counts its
records: live ones by state, and expired ones awaiting purge. Counting reads
the whole table (or the scope range of -prefix or -principal). Exits 5 when migrations are
pending, so that a deploy step can run "idem status || idem migrate". Reading
the version creates the (empty) version table <table>_schema when it is
missing.`,
	needsDB: true,
	timeout: time.Minute,
	flags: func(fs *flag.FlagSet, e *env) func(context.Context, *env) error {
		prefixOf := prefixFlags(fs, "count only records")
		var prefix string
		e.check = func() (err error) {
			prefix, err = prefixOf()
			return err
		}
		return func(ctx context.Context, e *env) error {
			s := e.target.store
			v, err := s.Version(ctx)
			if err != nil {
				return err
			}
			var counts *idem.Counts
			if v.Current > 0 {
				c, err := s.Counts(ctx, prefix)
				if err != nil {
					return err
				}
				counts = &c
			}
			if e.json {
				out := map[string]any{
					"table": s.Config().Table, "database": e.target.where,
					"version": map[string]int{"current": v.Current, "latest": v.Latest},
				}
				if counts != nil {
					live := map[string]int64{}
					for st, n := range counts.Live {
						live[st.String()] = n
					}
					out["records"] = map[string]any{"live": live, "expired": counts.Expired, "total": counts.Total()}
				}
				if err := writeJSON(e.stdout, out); err != nil {
					return err
				}
			} else {
				fmt.Fprintf(e.stdout, "table     %s on %s\n", s.Config().Table, e.target.where)
				fmt.Fprintf(e.stdout, "schema    version %d of %d", v.Current, v.Latest)
				if v.Current < v.Latest {
					fmt.Fprintf(e.stdout, " (run idem migrate)")
				}
				fmt.Fprintln(e.stdout)
				if counts != nil {
					for _, st := range []idem.State{idem.StatePending, idem.StateCompleted} {
						fmt.Fprintf(e.stdout, "%-9s %s live\n", st, count(counts.Live[st]))
					}
					for st, n := range counts.Live { // states added after these
						if st != idem.StatePending && st != idem.StateCompleted {
							fmt.Fprintf(e.stdout, "%-9s %s live\n", st, count(n))
						}
					}
					fmt.Fprintf(e.stdout, "expired   %s (purge deletes them)\n", count(counts.Expired))
					fmt.Fprintf(e.stdout, "total     %s\n", count(counts.Total()))
				}
			}
			if v.Current < v.Latest {
				return pendingError{v.Current, v.Latest}
			}
			return nil
		}
	},
}
