package main

import (
	"os"
	"strings"
	"testing"
)

// secret is the password in the DSNs of TestNoSecretInOutput.
const secret = "Hunter2s3cret"

// TestNoSecretInOutput: neither help, a usage error, a malformed DSN nor a
// database that cannot be reached prints the password of -dsn or
// $IDEM_DSN, whatever the DSN's form; and no file is named after it.
// Every server named is 127.0.0.1 on port 1, where nothing listens.
func TestNoSecretInOutput(t *testing.T) {
	t.Chdir(t.TempDir()) // a DSN taken for a SQLite path would make a file here
	pg := "postgres://app:" + secret + "@127.0.0.1:1/orders?connect_timeout=5"
	my := "mysql://app:" + secret + "@127.0.0.1:1/orders?timeout=5s"
	for _, tc := range []struct {
		name string
		env  string // $IDEM_DSN
		args []string
		want int // exit code
	}{
		{"help of a command", pg, []string{"help", "status"}, exitOK},
		{"--help", pg, []string{"status", "--help"}, exitOK},
		{"-h of purge", my, []string{"purge", "-h"}, exitOK},
		{"unknown flag", pg, []string{"list", "-nope"}, exitUsage},
		{"bad flag value", my, []string{"status", "-timeout", "soon"}, exitUsage},
		{"bad -state", pg, []string{"list", "-state", "stuck"}, exitUsage},
		{"missing -key", pg, []string{"delete", "-scope", "s"}, exitUsage},
		{"extra argument", pg, []string{"status", "extra"}, exitUsage},
		{"DSN as an argument", "", []string{"status", pg}, exitUsage},
		{"DSN as the command", "", []string{pg}, exitUsage},

		{"PostgreSQL unreachable, $IDEM_DSN", pg, []string{"status"}, exitFailure},
		{"PostgreSQL unreachable, -dsn", "", []string{"status", "-dsn", pg}, exitFailure},
		{"PostgreSQL password in the query", "", []string{"status", "-dsn", "postgres://app@127.0.0.1:1/orders?connect_timeout=5&password=" + secret}, exitFailure},
		{"PostgreSQL bad parameter", "", []string{"status", "-dsn", "postgres://app:" + secret + "@127.0.0.1:1/orders?connect_timeout=zz"}, exitUsage},
		{"PostgreSQL bad escape", "", []string{"status", "-dsn", "postgres://app:" + secret + "%zz@127.0.0.1:1/orders"}, exitUsage},
		{"PostgreSQL @ in the password", "", []string{"status", "-dsn", "postgres://app:p@" + secret + "@127.0.0.1:x/orders"}, exitUsage},
		{"PostgreSQL / in the password", "", []string{"status", "-dsn", "postgres://127.0.0.1:1/" + secret + "@127.0.0.1:1/orders?connect_timeout=5"}, exitUsage},
		{"PostgreSQL key=value", "", []string{"status", "-dsn", "host=127.0.0.1 port=1 user=app password=" + secret}, exitFailure},
		{"PostgreSQL key=value, quoted", "host=127.0.0.1 port=1 connect_timeout=5 password='" + secret + " \\' x'", []string{"migrate"}, exitFailure},
		{"PostgreSQL key=value, bad port", "", []string{"status", "-dsn", "host=127.0.0.1 port=x password = '" + secret + " \\' x' sslpassword=" + secret}, exitUsage},
		{"PostgreSQL key=value, bad target_session_attrs", "", []string{"status", "-dsn", "host=127.0.0.1 port=1 password='" + secret + " \\' x' target_session_attrs=sometimes"}, exitUsage},
		{"PostgreSQL key=value, unknown keyword", "", []string{"status", "-dsn", "host=127.0.0.1 password=" + secret + " search_path=app"}, exitUsage},
		{"PostgreSQL key=value, unterminated", "", []string{"status", "-dsn", "host=127.0.0.1 password='" + secret}, exitUsage},
		{"PostgreSQL key=value, unquoted space", "", []string{"status", "-dsn", "host=127.0.0.1 password=" + secret + " x port=1"}, exitUsage},

		{"MySQL unreachable, $IDEM_DSN", my, []string{"purge"}, exitFailure},
		{"MySQL unreachable, -dsn", "", []string{"inspect", "-dsn", my, "-scope", "s", "-key", "k"}, exitFailure},
		{"MySQL bad parameter", "", []string{"status", "-dsn", "mysql://app:" + secret + "@127.0.0.1:1/orders?timeout=zz"}, exitUsage},
		{"MySQL bad port", "", []string{"status", "-dsn", "mysql://app:" + secret + "@127.0.0.1:port/orders"}, exitUsage},
		{"MySQL bad escape", "", []string{"status", "-dsn", "mysql://app:" + secret + "%zz@127.0.0.1:1/orders"}, exitUsage},
		{"MySQL space in the password", "", []string{"status", "-dsn", "mysql://app:" + secret + " x@127.0.0.1:1/orders"}, exitUsage},
		{"MySQL / in the password", "", []string{"status", "-dsn", "mysql://127.0.0.1:1/" + secret + "@127.0.0.1:1/orders"}, exitUsage},
		{"go-sql-driver DSN", "", []string{"status", "-dsn", "app:" + secret + "@tcp(127.0.0.1:1)/orders?timeout=5s"}, exitFailure},
		{"go-sql-driver DSN, bad parameter", "", []string{"status", "-dsn", "app:" + secret + "@tcp(127.0.0.1:1)/orders?timeout=zz"}, exitUsage},
		{"go-sql-driver DSN, unclosed address", "", []string{"status", "-dsn", "app:" + secret + "@tcp(127.0.0.1:1/orders"}, exitUsage},
		{"user@host/db", "", []string{"migrate", "-dsn", "app:" + secret + "@127.0.0.1/orders"}, exitUsage},
		{"host:port/db", "", []string{"migrate", "-dsn", "127.0.0.1:1/" + secret}, exitUsage},
		{"unknown scheme", "", []string{"status", "-dsn", "redis://app:" + secret + "@127.0.0.1:1/0"}, exitUsage},
		{"not a scheme", "", []string{"status", "-dsn", "app:" + secret + "@tcp(127.0.0.1:1)/orders?x=y://z"}, exitUsage},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("IDEM_DSN", tc.env)
			code, out, errText := cli(t, false, tc.args...)
			if strings.Contains(out, secret) || strings.Contains(errText, secret) {
				t.Errorf("idem %q printed the password:\nstdout: %s\nstderr: %s", tc.args, out, errText)
			}
			if code != tc.want {
				t.Errorf("idem %q: exit %d, want %d\nstderr: %s", tc.args, code, tc.want, errText)
			}
		})
	}
	files, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		t.Errorf("a DSN was opened as a SQLite file: %q", f.Name())
	}
}
