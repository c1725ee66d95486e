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
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib" // also registers the "pgx" database/sql driver

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
// cfg. dsn has one of the forms classifyDSN recognises (see dsnForms); any
// other is a usage error, and nothing is opened or created. Unless create
// is set (migrate), a SQLite file that does not exist is an error, not a
// new empty database: a mistyped path must not leave a file behind.
func openTarget(ctx context.Context, dsn string, cfg idem.Config, create bool) (*target, error) {
	form, err := classifyDSN(dsn)
	if err != nil {
		return nil, err
	}
	var (
		db    *sql.DB
		where string
		newD  func(*sql.DB) (dialect.Driver[*sql.Tx], error)
	)
	newPostgres := func(db *sql.DB) (dialect.Driver[*sql.Tx], error) { return postgres.NewSQL(ctx, db, postgres.Options{}) }
	newMySQL := func(db *sql.DB) (dialect.Driver[*sql.Tx], error) { return mysql.New(ctx, db, mysql.Options{}) }
	switch form {
	case postgresURLForm:
		if _, ok := parseURL(dsn); !ok {
			scheme, _ := urlScheme(dsn)
			return nil, malformedURL(scheme)
		}
		where = "PostgreSQL at " + redactDSN(dsn)
		db, err = sql.Open("pgx", dsn)
		newD = newPostgres
	case postgresSettingsForm:
		where = "PostgreSQL at " + redactDSN(dsn)
		db, err = openPostgresSettings(dsn)
		newD = newPostgres
	case mysqlURLForm:
		u, ok := parseURL(dsn)
		if !ok {
			return nil, malformedURL("mysql")
		}
		where = "MySQL at " + redactDSN(dsn)
		db, err = openMySQL(u)
		newD = newMySQL
	case mysqlDriverForm:
		where = "MySQL at " + redactDSN(dsn)
		db, err = openMySQLDriverDSN(dsn)
		newD = newMySQL
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

// openPostgresSettings opens libpq key=value settings. pgx parses them
// without the password and sslpassword, so that none of its errors can
// quote them (it masks only their simplest spellings); they are set on the
// parsed configuration.
func openPostgresSettings(dsn string) (*sql.DB, error) {
	settings, err := parseSettings(dsn)
	if err != nil {
		return nil, usageError(fmt.Sprintf("-dsn key=value settings: %v", err))
	}
	var (
		kept                  []setting
		password, sslpassword *string
	)
	for _, s := range settings {
		switch s.key {
		case "password":
			password = &s.value
		case "sslpassword":
			sslpassword = &s.value
		default:
			kept = append(kept, s)
		}
	}
	var opts pgx.ParseConfigOptions
	if sslpassword != nil {
		opts.GetSSLPassword = func(context.Context) string { return *sslpassword }
	}
	cfg, err := pgx.ParseConfigWithOptions(formatSettings(kept), opts)
	if err != nil {
		return nil, usageError("-dsn: " + err.Error())
	}
	if password != nil {
		cfg.Password = *password
	}
	return stdlib.OpenDB(*cfg), nil
}

// openMySQLDriverDSN opens a go-sql-driver/mysql DSN,
// user:password@tcp(host:port)/db?params. The driver's parse errors name
// no user or password.
func openMySQLDriverDSN(dsn string) (*sql.DB, error) {
	cfg, err := mysqldriver.ParseDSN(dsn)
	if err != nil {
		return nil, usageError("-dsn: " + err.Error())
	}
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
