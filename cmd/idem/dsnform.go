package main

import (
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// dsnForm is the kind of database a -dsn names.
type dsnForm int

const (
	// sqliteForm: a plain path, sqlite:PATH, a file: URI or :memory:.
	sqliteForm dsnForm = iota + 1
	// postgresURLForm: a postgres:// or postgresql:// URL.
	postgresURLForm
	// postgresSettingsForm: libpq key=value settings.
	postgresSettingsForm
	// mysqlURLForm: a mysql:// URL.
	mysqlURLForm
	// mysqlDriverForm: go-sql-driver/mysql's user:password@tcp(host:port)/db.
	mysqlDriverForm
)

// dsnForms lists what -dsn takes, for the help and for the error that
// refuses anything else.
const dsnForms = `  SQLite      a path without = @ or : (orders.db, ./data/orders.db, /var/lib/app/idem.db),
              sqlite:PATH for any other file name, a file: URI, or :memory:
  PostgreSQL  postgres://user:password@host:port/db?sslmode=require (or postgresql://), or
              key=value settings: 'host=db port=5432 user=app password=pw dbname=orders'
  MySQL       mysql://user:password@host:port/db?param=value, or
              user:password@tcp(host:port)/db?param=value (go-sql-driver/mysql)
`

// classifyDSN says which form dsn has. Every form but a plain path has a
// mark of its own (a prefix, a scheme, key=, user@net/); a plain path has
// none of the characters those marks use (= @ :), so nothing is taken for
// a path that could be meant as something else. Anything else is a usage
// error listing the forms, which shows none of dsn: it may hold a
// password.
func classifyDSN(dsn string) (dsnForm, error) {
	scheme, isURL := urlScheme(dsn)
	switch {
	case dsn == "":
		return 0, usageError("-dsn is required (or set IDEM_DSN); it takes\n" + dsnForms)
	case isURL && (scheme == "postgres" || scheme == "postgresql"):
		return postgresURLForm, nil
	case isURL && scheme == "mysql":
		return mysqlURLForm, nil
	case isURL && scheme == "sqlite":
		// sqlite:///x is /x to some tools and x to others.
		return 0, usageError("-dsn sqlite://...: ambiguous; write sqlite:PATH (sqlite:/var/lib/app/idem.db, sqlite:orders.db)")
	case strings.HasPrefix(dsn, "sqlite:"):
		if dsn == "sqlite:" {
			return 0, usageError("-dsn sqlite: needs a path (sqlite:PATH)")
		}
		return sqliteForm, nil
	case strings.HasPrefix(dsn, "file:"), dsn == ":memory:":
		return sqliteForm, nil
	case isURL:
		return 0, usageError(fmt.Sprintf("-dsn %s://...: unknown database; -dsn takes\n%s", scheme, dsnForms))
	case looksLikeSettings(dsn):
		if err := checkPostgresSettings(dsn); err != nil {
			return 0, err
		}
		return postgresSettingsForm, nil
	case isMySQLDriverDSN(dsn):
		return mysqlDriverForm, nil
	case isPlainPath(dsn):
		return sqliteForm, nil
	}
	return 0, usageError("-dsn is none of the forms it takes (not shown: it may hold a password); for a SQLite file of any name write sqlite:PATH. -dsn takes\n" + dsnForms)
}

// isPlainPath reports whether dsn is a file path that no other form could
// mean: it holds none of = @ : (after a Windows volume name such as C:).
func isPlainPath(dsn string) bool {
	return !strings.ContainsAny(dsn[len(filepath.VolumeName(dsn)):], "=@:")
}

// settingStart matches the start of libpq key=value settings: a keyword,
// then = (spaces may surround it).
var settingStart = regexp.MustCompile(`^\s*[A-Za-z_][A-Za-z0-9_]*\s*=`)

func looksLikeSettings(dsn string) bool { return settingStart.MatchString(dsn) }

// mysqlNet matches what go-sql-driver/mysql's DSN has between the user's
// @ and the database's /: nothing (the default), or a network with an
// optional address in parentheses (the driver reports one not closed).
var mysqlNet = regexp.MustCompile(`^(?:(?:tcp|tcp4|tcp6|unix)(?:\(.*)?)?$`)

// isMySQLDriverDSN reports whether dsn has go-sql-driver/mysql's form,
// [user[:password]@][net[(addr)]]/dbname[?params], with the @ present
// (without it, /dbname is a path), split as the driver splits it: the
// last / ends the address, the last @ before it ends the password. A
// user name with a / in it is a path's directory.
func isMySQLDriverDSN(dsn string) bool {
	slash := strings.LastIndex(dsn, "/")
	if slash < 0 {
		return false
	}
	at := strings.LastIndex(dsn[:slash], "@")
	if at < 0 {
		return false
	}
	user, _, _ := strings.Cut(dsn[:at], ":")
	return !strings.Contains(user, "/") && mysqlNet.MatchString(dsn[at+1:slash])
}

// postgresKeywords are the libpq connection keywords that pgx, the
// PostgreSQL driver, takes in key=value settings. pgx would send any other
// keyword to the server as a setting of the session, which refuses it;
// such settings go in options='-c name=value'.
var postgresKeywords = []string{
	"application_name", "channel_binding", "client_encoding", "connect_timeout", "dbname", "host",
	"krbspn", "krbsrvname", "max_protocol_version", "min_protocol_version", "options", "passfile",
	"password", "port", "require_auth", "service", "servicefile", "sslcert", "sslcertmode", "sslkey",
	"sslmode", "sslnegotiation", "sslpassword", "sslrootcert", "sslsni", "target_session_attrs", "user",
}

// checkPostgresSettings checks that dsn parses as key=value settings and
// names only keywords pgx takes. Its errors name keywords, never values.
func checkPostgresSettings(dsn string) error {
	settings, err := parseSettings(dsn)
	if err != nil {
		return usageError(fmt.Sprintf("-dsn key=value settings (not shown: they may hold the password): %v", err))
	}
	for _, s := range settings {
		if !slices.Contains(postgresKeywords, s.key) {
			return usageError(fmt.Sprintf("-dsn: %q is no PostgreSQL connection keyword idem takes (server settings go in options='-c name=value'); the keywords are %s",
				s.key, strings.Join(postgresKeywords, " ")))
		}
	}
	return nil
}

// setting is one key=value of a libpq connection string.
type setting struct{ key, value string }

// keyword matches a keyword of key=value settings.
var keyword = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// errUnterminated: a quoted value has no closing quote.
var errUnterminated = errors.New("a quoted value has no closing '")

// parseSettings parses libpq key=value settings as libpq (and pgx) do:
// settings separated by spaces, each a keyword, =, and a value that is
// either bare (up to the next space; a backslash takes the next character
// as it is) or in single quotes (a backslash takes the next character as
// it is, \' a quote). Errors name a keyword at most, never a value.
func parseSettings(s string) ([]setting, error) {
	const spaces = " \t\n\r\v\f"
	var settings []setting
	for s = strings.TrimLeft(s, spaces); s != ""; s = strings.TrimLeft(s, spaces) {
		eq := strings.IndexByte(s, '=')
		if eq < 0 {
			return nil, errors.New("text after the last setting is no key=value")
		}
		key := strings.TrimRight(s[:eq], spaces)
		if !keyword.MatchString(key) {
			return nil, errors.New("a keyword is not a word (letters, digits, _), or a value has an unquoted space")
		}
		s = strings.TrimLeft(s[eq+1:], spaces)
		var value strings.Builder
		if strings.HasPrefix(s, "'") {
			end := 1
			for ; end < len(s) && s[end] != '\''; end++ {
				if s[end] == '\\' && end+1 < len(s) {
					end++
				}
				value.WriteByte(s[end])
			}
			if end == len(s) {
				return nil, fmt.Errorf("%s: %w", key, errUnterminated)
			}
			s = s[end+1:]
			if s != "" && !strings.ContainsRune(spaces, rune(s[0])) {
				return nil, fmt.Errorf("%s: text follows the quoted value without a space", key)
			}
		} else {
			end := 0
			for ; end < len(s) && !strings.ContainsRune(spaces, rune(s[end])); end++ {
				if s[end] == '\\' && end+1 < len(s) {
					end++
				}
				value.WriteByte(s[end])
			}
			s = s[end:]
		}
		settings = append(settings, setting{key: key, value: value.String()})
	}
	if len(settings) == 0 {
		return nil, errors.New("no settings")
	}
	return settings, nil
}

// formatSettings writes settings as key=value settings that parse back to
// them: every value quoted, with \ and ' escaped.
func formatSettings(settings []setting) string {
	quote := strings.NewReplacer(`\`, `\\`, `'`, `\'`)
	parts := make([]string, len(settings))
	for i, s := range settings {
		parts[i] = s.key + "='" + quote.Replace(s.value) + "'"
	}
	return strings.Join(parts, " ")
}
