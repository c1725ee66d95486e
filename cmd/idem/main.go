// Command idem operates idem's table in a database: it migrates the schema,
// reports its version and record counts, shows, lists and deletes records,
// purges expired ones with progress, and writes migration files for
// golang-migrate and goose.
//
//	go run github.com/idemkit/idem/cmd/idem status -dsn postgres://user:pw@host/db
//
// Run "idem help" for the commands and "idem help COMMAND" for each one's
// flags. Exit codes:
//
//	0    success
//	1    failure (the database could not be reached, a statement failed)
//	2    usage: an unknown command or flag, a missing or malformed value
//	3    not found: inspect or delete found no record for the key
//	4    refused: delete found the record pending and live (use -force)
//	5    status: migrations are pending (the database is behind this binary)
//	6    the database's schema is newer than this binary
//	130  interrupted (SIGINT or SIGTERM)
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/idemkit/idem"
)

// Exit codes; see the package documentation.
const (
	exitOK          = 0
	exitFailure     = 1
	exitUsage       = 2
	exitNotFound    = 3
	exitRefused     = 4
	exitPending     = 5
	exitSchemaNewer = 6
	exitInterrupted = 130
)

const exitCodes = `Exit codes:
  0    success
  1    failure (the database could not be reached, a statement failed)
  2    usage: an unknown command or flag, a missing or malformed value
  3    not found: inspect or delete found no record for the key
  4    refused: delete found the record pending and live (use -force)
  5    status: migrations are pending (the database is behind this binary)
  6    the database's schema is newer than this binary
  130  interrupted (SIGINT or SIGTERM)
`

// command is one subcommand.
type command struct {
	name, summary string
	// usage is the text after "Usage: idem NAME", with what it does.
	usage string
	// needsDB: the command takes -dsn, -table and -timeout and gets a
	// target.
	needsDB bool
	// createsDB: the command may create a SQLite file that does not exist
	// (migrate); every other command refuses a missing file.
	createsDB bool
	// timeout is the default of -timeout (0: none).
	timeout time.Duration
	// flags adds the command's own flags and returns the function that
	// runs it; it may set e.configure.
	flags func(fs *flag.FlagSet, e *env) func(ctx context.Context, e *env) error
}

// env is what a command runs with.
type env struct {
	stdout, stderr io.Writer
	json           bool
	target         *target
	// configure, when set, adjusts the store's Config after the flags
	// are parsed.
	configure func(*idem.Config)
	// isTerminal reports whether stderr is a terminal (progress redraws a
	// line there; elsewhere it prints plain lines).
	isTerminal bool
	// check, when set, validates the parsed flags before the database is
	// opened, so a usage error touches nothing.
	check func() error
}

var commands []command // set in init: the help command lists them

func init() {
	commands = []command{migrateCommand, statusCommand, inspectCommand, listCommand, deleteCommand, purgeCommand, filesCommand}
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr, stderrIsTerminal())
	stop()
	os.Exit(code)
}

// stderrIsTerminal reports whether stderr is a character device: a
// terminal, not a file or a pipe.
func stderrIsTerminal() bool {
	fi, err := os.Stderr.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// usageError is a mistake in the command line (exit 2).
type usageError string

func (e usageError) Error() string { return string(e) }

// run runs the command line args and returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer, isTerminal bool) int {
	if len(args) == 0 {
		mainUsage(stderr)
		return exitUsage
	}
	name := args[0]
	switch name {
	case "help", "-h", "-help", "--help":
		if len(args) > 1 {
			if c, ok := find(args[1]); ok {
				fs, _, _ := newFlagSet(c, stdout, new(env))
				fs.Usage()
				return exitOK
			}
			fmt.Fprintf(stderr, "idem: no command %q\n", redactDSN(args[1]))
			return exitUsage
		}
		mainUsage(stdout)
		return exitOK
	}
	c, ok := find(name)
	if !ok {
		fmt.Fprintf(stderr, "idem: no command %q\n\n", redactDSN(name))
		mainUsage(stderr)
		return exitUsage
	}
	e := &env{stdout: stdout, stderr: stderr, isTerminal: isTerminal}
	fs, db, runCmd := newFlagSet(c, stderr, e)
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "idem %s: unexpected argument %q\n", c.name, redactDSN(fs.Arg(0)))
		return exitUsage
	}
	if e.check != nil {
		if err := e.check(); err != nil {
			return fail(ctx, stderr, c.name, err)
		}
	}
	if db.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, db.timeout)
		defer cancel()
	}
	if c.needsDB {
		if db.dsn == "" {
			// Read after parsing, not as the flag's default: a default
			// is printed by --help and every usage error.
			db.dsn = os.Getenv("IDEM_DSN")
		}
		cfg := idem.Config{Table: db.table}
		if e.configure != nil {
			e.configure(&cfg)
		}
		t, err := openTarget(ctx, db.dsn, cfg, c.createsDB)
		if err != nil {
			return fail(ctx, stderr, c.name, err)
		}
		defer func() { _ = t.Close() }()
		e.target = t
	}
	if err := runCmd(ctx, e); err != nil {
		return fail(ctx, stderr, c.name, err)
	}
	return exitOK
}

// fail prints err and returns its exit code.
func fail(ctx context.Context, stderr io.Writer, name string, err error) int {
	var (
		usage   usageError
		pending pendingError
	)
	fmt.Fprintf(stderr, "idem %s: %v\n", name, err)
	switch {
	case errors.As(err, &usage):
		return exitUsage
	case errors.As(err, &pending):
		return exitPending
	case errors.Is(err, idem.ErrNotFound):
		return exitNotFound
	case errors.Is(err, idem.ErrRecordInFlight):
		return exitRefused
	case errors.Is(err, idem.ErrSchemaNewer):
		return exitSchemaNewer
	case ctx.Err() != nil && errors.Is(context.Cause(ctx), context.Canceled):
		return exitInterrupted
	case errors.Is(err, idem.ErrInvalidConfig) || errors.Is(err, idem.ErrInvalidKey) || errors.Is(err, idem.ErrInvalidScope):
		return exitUsage
	}
	return exitFailure
}

// pendingError: status found migrations to apply (exit 5).
type pendingError struct{ current, latest int }

func (e pendingError) Error() string {
	return fmt.Sprintf("schema version %d of %d: run idem migrate", e.current, e.latest)
}

func find(name string) (command, bool) {
	for _, c := range commands {
		if c.name == name {
			return c, true
		}
	}
	return command{}, false
}

// dbFlags are the flags of the commands that work on a database.
type dbFlags struct {
	dsn, table string
	timeout    time.Duration
}

// newFlagSet makes a command's flag set with every flag it takes and its
// usage text, and returns the function that runs the command.
func newFlagSet(c command, out io.Writer, e *env) (*flag.FlagSet, *dbFlags, func(context.Context, *env) error) {
	fs := flag.NewFlagSet("idem "+c.name, flag.ContinueOnError)
	fs.SetOutput(out)
	fs.BoolVar(&e.json, "json", false, "print the result as JSON on stdout, for scripts")
	db := &dbFlags{}
	if c.needsDB {
		fs.StringVar(&db.dsn, "dsn", "", "the database, in one of these forms (any other is refused, exit 2); default $IDEM_DSN\n"+strings.TrimRight(dsnForms, "\n"))
		fs.StringVar(&db.table, "table", idem.DefaultTable, "the idem table")
		fs.DurationVar(&db.timeout, "timeout", c.timeout, "give up after this long (0: never)")
	}
	runCmd := c.flags(fs, e)
	fs.Usage = func() {
		fmt.Fprintf(out, "Usage: idem %s\n\n", strings.TrimSpace(c.usage))
		fmt.Fprintf(out, "Flags (-flag or --flag):\n")
		fs.PrintDefaults()
		fmt.Fprintf(out, "\n%s", exitCodes)
	}
	return fs, db, runCmd
}

func mainUsage(w io.Writer) {
	fmt.Fprintf(w, `idem operates idem's idempotency table in a database.

Usage: idem COMMAND [flags]

Commands:
`)
	for _, c := range commands {
		fmt.Fprintf(w, "  %-16s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(w, `  %-16s %s

Every command but migration-files takes -dsn (or $IDEM_DSN) and -table; every
command takes -json. "idem help COMMAND" shows a command's flags.

-dsn takes these forms; any other is refused (exit 2), nothing is opened:
%s
Examples:
  idem status -dsn orders.db
  idem migrate -dsn 'postgres://app:secret@db:5432/orders?sslmode=require'
  idem list -dsn "$IDEM_DSN" -state pending -min-age 10m -live
  idem list -dsn "$IDEM_DSN" -principal tenant-42
  idem inspect -dsn "$IDEM_DSN" -principal tenant-42 -method POST -route /orders -key k_9f2c
  idem purge -dsn 'mysql://app:secret@db:3306/orders'

%s`, "help", "show this text, or a command's flags", dsnForms, exitCodes)
}
