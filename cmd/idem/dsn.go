package main

import (
	"net/url"
	"regexp"
	"strings"
)

// masked stands for a password in what the command prints.
const masked = "xxxxx"

// secretKey matches the names of query parameters and key=value settings
// that hold a secret: password, sslpassword, passwd, a token.
var secretKey = regexp.MustCompile(`(?i)pass|secret|token`)

// secretSetting matches a secret setting of a PostgreSQL key=value
// connection string, with its value quoted (up to the closing quote or the
// end) or bare.
var secretSetting = regexp.MustCompile(`(?i)(\b\w*(?:pass|secret|token)\w*\s*=\s*)('(?:[^'\\]|\\.)*'?|\S*)`)

// redactDSN returns dsn fit to print: every password it may hold replaced
// by xxxxx. It knows a URL (scheme://user:password@host/db?password=...),
// a PostgreSQL key=value string (password=... or password='...') and
// go-sql-driver's user:password@tcp(host)/db. A URL that does not parse, or
// parses ambiguously (an @ after the host, as when a / ? or # in the
// password is not percent-encoded), is shown as scheme://xxxxx: where its
// password ends cannot be known, so nothing after the scheme is shown.
// Anything else, a SQLite path, is returned as it is.
func redactDSN(dsn string) string {
	if scheme, ok := urlScheme(dsn); ok {
		u, ok := parseURL(dsn)
		if !ok {
			return scheme + "://" + masked
		}
		if _, has := u.User.Password(); has {
			u.User = url.UserPassword(u.User.Username(), masked)
		}
		pairs := strings.Split(u.RawQuery, "&")
		for i, p := range pairs {
			if k, _, ok := strings.Cut(p, "="); ok && secretKey.MatchString(unescape(k)) {
				pairs[i] = k + "=" + masked
			}
		}
		u.RawQuery = strings.Join(pairs, "&")
		return u.String()
	}
	shown := secretSetting.ReplaceAllString(dsn, "${1}"+masked)
	if at := strings.LastIndex(shown, "@"); at >= 0 {
		if user, _, ok := strings.Cut(shown[:at], ":"); ok {
			shown = user + ":" + masked + shown[at:]
		}
	}
	return shown
}

// urlScheme returns the scheme of dsn when it is a URL: a scheme (a letter,
// then letters, digits, + - .) followed by "://".
func urlScheme(dsn string) (string, bool) {
	scheme, _, ok := strings.Cut(dsn, "://")
	if !ok || scheme == "" {
		return "", false
	}
	for i, c := range scheme {
		letter := 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z'
		other := '0' <= c && c <= '9' || c == '+' || c == '-' || c == '.'
		if !letter && (i == 0 || !other) {
			return "", false
		}
	}
	return scheme, true
}

// parseURL parses a database URL, and reports false for one that does not
// parse or has an @ after its host: its password held a / ? or # that was
// not percent-encoded, and spilled into the path, query or fragment.
func parseURL(dsn string) (*url.URL, bool) {
	u, err := url.Parse(dsn)
	if err != nil || u.Opaque != "" || strings.Contains(u.EscapedPath()+u.RawQuery+u.EscapedFragment(), "@") {
		return nil, false
	}
	return u, true
}

func unescape(s string) string {
	if d, err := url.QueryUnescape(s); err == nil {
		return d
	}
	return s
}
