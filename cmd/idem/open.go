package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"strings"

	mysqldriver "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"
	_ "github.com/jackc/pgx/v5/stdlib" // registers the "pgx" database/sql driver

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/dialect"
	"github.com/idemkit/idem/mysql"
	"github.com/idemkit/idem/postgres"
	"github.com/idemkit/idem/sqlite"
)

// target is the store a command works on and the database behind it.
type target struct {
	store *idem.Store[*sql.Tx]
	db    *sql.DB
	// where names the database for messages, without a password.
	where string
}

func (t *target) Close() error { return t.db.Close() }

// openTarget opens the database dsn names and makes a store on table with
// cfg. dsn is a SQLite file path (or sqlite:PATH), a postgres:// or
// postgresql:// URL, or a mysql://user:password@host:port/database URL
// whose query holds go-sql-driver/mysql parameters. Unless create is set
// (migrate), a SQLite file that does not exist is an error, not a new
// empty database: a mistyped path must not leave a file behind.
func openTarget(ctx context.Context, dsn string, cfg idem.Config, create bool) (*target, error) {
	if dsn == "" {
		return nil, usageError("-dsn is required (or set IDEM_DSN): a SQLite path, postgres://... or mysql://...")
	}
	var (
		db    *sql.DB
		where string
		err   error
		newD  func(*sql.DB) (dialect.Driver[*sql.Tx], error)
	)
	scheme, isURL := urlScheme(dsn)
	switch {
	case isURL && (scheme == "postgres" || scheme == "postgresql"):
		if _, ok := parseURL(dsn); !ok {
			return nil, malformedURL(scheme)
		}
		where = "PostgreSQL at " + redactDSN(dsn)
		db, err = sql.Open("pgx", dsn)
		newD = func(db *sql.DB) (dialect.Driver[*sql.Tx], error) { return postgres.NewSQL(ctx, db, postgres.Options{}) }
	case isURL && scheme == "mysql":
		u, ok := parseURL(dsn)
		if !ok {
			return nil, malformedURL(scheme)
		}
		where = "MySQL at " + redactDSN(dsn)
		db, err = openMySQL(u)
		newD = func(db *sql.DB) (dialect.Driver[*sql.Tx], error) { return mysql.New(ctx, db, mysql.Options{}) }
	case isURL:
		return nil, usageError(fmt.Sprintf("-dsn %s://...: unknown database; use a SQLite path, postgres:// or mysql://", scheme))
	case !strings.HasPrefix(dsn, "sqlite:") && redactDSN(dsn) != dsn:
		// A PostgreSQL key=value string or a go-sql-driver DSN: opened
		// as a SQLite path it would make a file named by the password.
		return nil, usageError("-dsn holds a password but is not a postgres:// or mysql:// URL; write it as postgres://user:password@host:port/db or mysql://user:password@host:port/db (for a SQLite file of that name, sqlite:PATH)")
	default:
		path := strings.TrimPrefix(dsn, "sqlite:")
		where = "SQLite file " + path
		if !create {
			if path, err = existingSQLite(path); err != nil {
				return nil, err
			}
		}
		db, err = sqlite.Open(path)
		newD = func(db *sql.DB) (dialect.Driver[*sql.Tx], error) { return sqlite.New(ctx, db, sqlite.Options{}) }
	}
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", where, err)
	}
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		if bad := (*pgconn.ParseConfigError)(nil); errors.As(err, &bad) {
			return nil, usageError("-dsn: " + err.Error()) // pgx shows the URL without its password
		}
		return nil, fmt.Errorf("connect to %s: %w", where, err)
	}
	d, err := newD(db)
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("%s: %w", where, err)
	}
	store, err := idem.New(d, cfg)
	if err != nil {
		db.Close()
		return nil, err
	}
	return &target{store: store, db: db, where: where}, nil
}

// existingSQLite returns the DSN that opens the SQLite database at path
// only if it exists: a plain path is checked, a "file:" URI gets mode=rw
// (unless it sets a mode), so that SQLite refuses to create it. In-memory
// databases are returned as they are.
func existingSQLite(path string) (string, error) {
	base, query, _ := strings.Cut(path, "?")
	switch {
	case base == ":memory:" || base == "file::memory:":
		return path, nil
	case strings.HasPrefix(base, "file:"):
		q, err := url.ParseQuery(query)
		if err != nil || q.Has("mode") {
			return path, nil // sqlite.Open reports a malformed query
		}
		q.Set("mode", "rw")
		return base + "?" + q.Encode(), nil
	}
	if _, err := os.Stat(path); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("SQLite file %s does not exist (idem migrate creates it): %w", path, err)
		}
		return "", fmt.Errorf("SQLite file %s: %w", path, err)
	}
	return path, nil
}

// openMySQL opens a mysql://user:password@host:port/database?params URL.
// The parameters are parsed without the user and password, so that no
// error of go-sql-driver/mysql can quote them.
func openMySQL(u *url.URL) (*sql.DB, error) {
	cfg := mysqldriver.NewConfig()
	cfg.Net, cfg.Addr, cfg.DBName = "tcp", u.Host, strings.TrimPrefix(u.Path, "/")
	if u.RawQuery != "" {
		var err error
		if cfg, err = mysqldriver.ParseDSN(cfg.FormatDSN() + "?" + u.RawQuery); err != nil {
			return nil, usageError("-dsn parameters: " + err.Error())
		}
	}
	cfg.User = u.User.Username()
	cfg.Passwd, _ = u.User.Password()
	connector, err := mysqldriver.NewConnector(cfg)
	if err != nil {
		return nil, err
	}
	return sql.OpenDB(connector), nil
}

// malformedURL is the usage error of a database URL that does not parse, or
// not unambiguously. It shows none of the URL: its password may be anywhere.
func malformedURL(scheme string) error {
	return usageError(fmt.Sprintf("-dsn %s://...: malformed URL (not shown: it may hold the password); percent-encode @ : / ? # %% and spaces in the user name, password and parameter values, and give the port as a number", scheme))
}
