package cli_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	mysqldriver "github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/dialect"
	"github.com/idemkit/idem/integration/containers"
	"github.com/idemkit/idem/mysql"
	"github.com/idemkit/idem/postgres"
	"github.com/idemkit/idem/sqlite"
)

func TestMain(m *testing.M) { containers.Main(m) }

var binary struct {
	once sync.Once
	path string
	err  error
}

// idemBinary builds cmd/idem once per test binary.
func idemBinary(t *testing.T) string {
	t.Helper()
	binary.once.Do(func() {
		dir, err := os.MkdirTemp("", "idem-cli-")
		if err != nil {
			binary.err = err
			return
		}
		binary.path = filepath.Join(dir, "idem")
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		out, err := exec.CommandContext(ctx, "go", "build", "-o", binary.path, "github.com/idemkit/idem/cmd/idem").CombinedOutput()
		if err != nil {
			binary.err = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if binary.err != nil {
		t.Fatal(binary.err)
	}
	return binary.path
}

// idemRun runs the binary and returns its exit code, stdout and stderr.
func idemRun(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, idemBinary(t), args...)
	cmd.Env = append(os.Environ(), "IDEM_DSN=")
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0, out.String(), errOut.String()
	case errors.As(err, &exit):
		return exit.ExitCode(), out.String(), errOut.String()
	}
	t.Fatalf("idem %q: %v", args, err)
	return 0, "", ""
}

// database is one backend: the DSN the command takes, and a driver for the
// test's own seeding on the same database.
type database struct {
	name string
	dsn  func(t *testing.T) string
	// driver returns an idem driver on the same database.
	driver func(t *testing.T, dsn string) dialect.Driver[*sql.Tx]
}

var databases = []database{
	{
		name: "sqlite",
		dsn:  func(t *testing.T) string { return filepath.Join(t.TempDir(), "idem.db") },
		driver: func(t *testing.T, dsn string) dialect.Driver[*sql.Tx] {
			db, err := sqlite.Open(dsn)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { db.Close() })
			d, err := sqlite.New(t.Context(), db, sqlite.Options{})
			if err != nil {
				t.Fatal(err)
			}
			return d
		},
	},
	{
		name: "postgres",
		dsn:  func(t *testing.T) string { return containers.Postgres(t) },
		driver: func(t *testing.T, dsn string) dialect.Driver[*sql.Tx] {
			db, err := sql.Open("pgx", dsn)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { db.Close() })
			d, err := postgres.NewSQL(t.Context(), db, postgres.Options{})
			if err != nil {
				t.Fatal(err)
			}
			return d
		},
	},
	{
		name: "mysql",
		dsn: func(t *testing.T) string {
			// The command takes a URL: mysql://user:password@host:port/db.
			cfg, err := mysqldriver.ParseDSN(containers.MySQL(t))
			if err != nil {
				t.Fatal(err)
			}
			return fmt.Sprintf("mysql://%s:%s@%s/%s", cfg.User, cfg.Passwd, cfg.Addr, cfg.DBName)
		},
		driver: func(t *testing.T, dsn string) dialect.Driver[*sql.Tx] {
			db, err := sql.Open("mysql", containers.MySQL(t))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { db.Close() })
			d, err := mysql.New(t.Context(), db, mysql.Options{})
			if err != nil {
				t.Fatal(err)
			}
			return d
		},
	},
}

func databaseNamed(t *testing.T, name string) database {
	t.Helper()
	for _, db := range databases {
		if db.name == name {
			return db
		}
	}
	t.Fatalf("no database %q", name)
	return database{}
}

// TestCommands drives every command against each backend, as an operator
// would: migrate, seed records through the library, status, inspect, list
// with paging, delete with and without -force, and a purge with progress.
func TestCommands(t *testing.T) {
	for _, db := range databases {
		t.Run(db.name, func(t *testing.T) {
			t.Parallel()
			dsn := db.dsn(t)
			table := fmt.Sprintf("idem_cli_%s_%d", db.name, time.Now().UnixNano()%1_000_000)
			d := db.driver(t, dsn)
			t.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				for _, name := range []string{table, table + "_schema", table + "_fence"} {
					if _, err := d.Pool().Exec(ctx, "DROP TABLE IF EXISTS "+name); err != nil {
						t.Errorf("drop %s: %v", name, err)
					}
				}
			})
			base := []string{"-dsn", dsn, "-table", table}
			cmd := func(name string, args ...string) []string { return append(append([]string{name}, base...), args...) }

			if code, _, errText := idemRun(t, cmd("status")...); code != 5 {
				t.Fatalf("status before migrate: exit %d (%s), want 5", code, errText)
			}
			latest := len(d.Dialect().Schema(mustTable(t, table)).Migrations)
			if code, out, errText := idemRun(t, cmd("migrate")...); code != 0 || !strings.Contains(out, fmt.Sprintf("0 -> %d", latest)) {
				t.Fatalf("migrate: exit %d: %s %s", code, out, errText)
			}

			// Records through the library: 30 expired, 4 completed, 1 stuck.
			old := time.Now().Add(-72 * time.Hour)
			clock := &old
			store, err := idem.New(d, idem.Config{Table: table, Clock: func() time.Time { return *clock }})
			if err != nil {
				t.Fatal(err)
			}
			do := func(scope, key string) {
				req := idem.Request{Scope: scope, Key: key, Fingerprint: idem.FingerprintRequest("POST", "/", []byte(key))}
				if _, err := store.Do(t.Context(), req, func(context.Context, *sql.Tx) (idem.Response, error) {
					return idem.Response{Status: 201, Body: []byte("created " + key)}, nil
				}); err != nil {
					t.Fatal(err)
				}
			}
			for i := range 30 {
				do("tenant-old POST /x", fmt.Sprintf("old-%02d", i))
			}
			recent := time.Now().Add(-time.Hour)
			clock = &recent
			for i := range 4 {
				do("tenant-a POST /orders", fmt.Sprintf("k%d", i))
			}
			tx, err := d.Begin(t.Context(), dialect.BeginOptions{})
			if err != nil {
				t.Fatal(err)
			}
			stuck := idem.Request{Scope: "tenant-a POST /orders", Key: "stuck", Fingerprint: idem.FingerprintRequest("POST", "/", nil)}
			if c, err := store.Claim(t.Context(), tx.Native(), stuck); err != nil || c.Outcome != idem.Won {
				t.Fatalf("claim: %v, %v", c, err)
			}
			if err := tx.Commit(t.Context()); err != nil {
				t.Fatal(err)
			}

			code, out, _ := idemRun(t, cmd("status", "-json")...)
			var status struct {
				Records struct {
					Live    map[string]int64 `json:"live"`
					Expired int64            `json:"expired"`
				} `json:"records"`
			}
			if err := json.Unmarshal([]byte(out), &status); code != 0 || err != nil ||
				status.Records.Live["pending"] != 1 || status.Records.Live["completed"] != 4 || status.Records.Expired != 30 {
				t.Fatalf("status -json: exit %d, %v: %s", code, err, out)
			}
			if code, out, _ := idemRun(t, cmd("status")...); code != 0 || !strings.Contains(out, fmt.Sprintf("version %d of %d", latest, latest)) || !strings.Contains(out, "expired   30") {
				t.Errorf("status: exit %d:\n%s", code, out)
			}

			if code, out, _ := idemRun(t, cmd("inspect", "-scope", "tenant-a POST /orders", "-key", "k1", "-json")...); code != 0 ||
				!strings.Contains(out, `"state": "completed"`) || !strings.Contains(out, `"body_bytes": 10`) {
				t.Errorf("inspect: exit %d: %s", code, out)
			}
			if code, _, _ := idemRun(t, cmd("inspect", "-scope", "tenant-a POST /orders", "-key", "nope")...); code != 3 {
				t.Errorf("inspect of a missing key: exit %d, want 3", code)
			}

			var keys []string
			after := ""
			for range 10 {
				args := cmd("list", "-prefix", "tenant-a", "-limit", "2", "-json")
				if after != "" {
					args = append(args, "-after", after)
				}
				code, out, errText := idemRun(t, args...)
				var page struct {
					Records []struct{ Key string } `json:"records"`
					Next    string                 `json:"next"`
				}
				if err := json.Unmarshal([]byte(out), &page); code != 0 || err != nil {
					t.Fatalf("list: exit %d, %v: %s %s", code, err, out, errText)
				}
				for _, r := range page.Records {
					keys = append(keys, r.Key)
				}
				if after = page.Next; after == "" {
					break
				}
			}
			if got := strings.Join(keys, ","); got != "k0,k1,k2,k3,stuck" {
				t.Errorf("list pages: %s", got)
			}
			if code, out, _ := idemRun(t, cmd("list", "-state", "pending", "-live", "-min-age", "30m")...); code != 0 || !strings.Contains(out, "stuck") || strings.Contains(out, "k1") {
				t.Errorf("list of stuck keys: exit %d:\n%s", code, out)
			}

			if code, _, _ := idemRun(t, cmd("delete", "-scope", stuck.Scope, "-key", stuck.Key)...); code != 4 {
				t.Errorf("delete of the live pending record: exit %d, want 4", code)
			}
			if code, _, errText := idemRun(t, cmd("delete", "-scope", stuck.Scope, "-key", stuck.Key, "-force")...); code != 0 {
				t.Errorf("delete -force: exit %d: %s", code, errText)
			}
			if code, _, _ := idemRun(t, cmd("delete", "-scope", "tenant-a POST /orders", "-key", "k0")...); code != 0 {
				t.Errorf("delete of a completed record: exit %d", code)
			}

			code, out, errText := idemRun(t, cmd("purge", "-batch", "4", "-duty", "0.5", "-progress", "1ns", "-json")...)
			var purged struct {
				Deleted int64 `json:"deleted"`
			}
			if err := json.Unmarshal([]byte(out), &purged); code != 0 || err != nil || purged.Deleted != 30 {
				t.Fatalf("purge: exit %d, %v: %s %s", code, err, out, errText)
			}
			if !strings.Contains(errText, "purge: 30 of ~30 deleted (100%)") || !strings.Contains(errText, "rows/s") || strings.Contains(errText, "\r") {
				t.Errorf("purge progress (stderr is a pipe: plain lines):\n%s", errText)
			}
			if code, out, _ := idemRun(t, cmd("status", "-json")...); code != 0 || !strings.Contains(out, `"expired": 0`) || !strings.Contains(out, `"total": 3`) {
				t.Errorf("status after purge: exit %d: %s", code, out)
			}
		})
	}
}

// TestDSNForms: the command opens PostgreSQL from libpq key=value settings
// and MySQL from a go-sql-driver/mysql DSN, as from their URLs.
func TestDSNForms(t *testing.T) {
	for _, tc := range []struct {
		name string
		dsn  func(t *testing.T) string
		// driver opens the same database for the test's cleanup.
		driver func(t *testing.T, dsn string) dialect.Driver[*sql.Tx]
	}{
		{
			name: "postgres key=value",
			dsn: func(t *testing.T) string {
				u, err := url.Parse(containers.Postgres(t))
				if err != nil {
					t.Fatal(err)
				}
				pw, _ := u.User.Password()
				quote := strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace
				settings := fmt.Sprintf("host=%s port=%s user=%s password='%s' dbname=%s", u.Hostname(), u.Port(), u.User.Username(), quote(pw), strings.TrimPrefix(u.Path, "/"))
				if mode := u.Query().Get("sslmode"); mode != "" {
					settings += " sslmode=" + mode
				}
				return settings
			},
			driver: func(t *testing.T, _ string) dialect.Driver[*sql.Tx] {
				return databaseNamed(t, "postgres").driver(t, containers.Postgres(t))
			},
		},
		{
			name:   "mysql go-sql-driver",
			dsn:    func(t *testing.T) string { return containers.MySQL(t) + "?timeout=10s" },
			driver: func(t *testing.T, _ string) dialect.Driver[*sql.Tx] { return databaseNamed(t, "mysql").driver(t, "") },
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dsn := tc.dsn(t)
			table := fmt.Sprintf("idem_cli_dsn_%d", time.Now().UnixNano()%1_000_000_000)
			d := tc.driver(t, dsn)
			t.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				for _, name := range []string{table, table + "_schema", table + "_fence"} {
					if _, err := d.Pool().Exec(ctx, "DROP TABLE IF EXISTS "+name); err != nil {
						t.Errorf("drop %s: %v", name, err)
					}
				}
			})
			latest := len(d.Dialect().Schema(mustTable(t, table)).Migrations)
			if code, out, errText := idemRun(t, "migrate", "-dsn", dsn, "-table", table); code != 0 || !strings.Contains(out, fmt.Sprintf("0 -> %d", latest)) {
				t.Fatalf("migrate: exit %d: %s %s", code, out, errText)
			}
			store, err := idem.New(d, idem.Config{Table: table})
			if err != nil {
				t.Fatal(err)
			}
			if v, err := store.Version(t.Context()); err != nil || v.Current != latest {
				t.Errorf("the database's schema after migrate: %+v, %v; want version %d", v, err, latest)
			}
			if code, out, errText := idemRun(t, "status", "-dsn", dsn, "-table", table); code != 0 || !strings.Contains(out, fmt.Sprintf("version %d of %d", latest, latest)) {
				t.Errorf("status: exit %d: %s %s", code, out, errText)
			}
		})
	}
}

// TestUnreachable: a database that cannot be reached is a failure (exit 1)
// with a message naming it, and never shows the password.
func TestUnreachable(t *testing.T) {
	code, _, errText := idemRun(t, "status", "-dsn", "postgres://idem:s3cret@127.0.0.1:1/idem?connect_timeout=2", "-timeout", "20s")
	if code != 1 || !strings.Contains(errText, "127.0.0.1:1") || strings.Contains(errText, "s3cret") {
		t.Errorf("status on a closed port: exit %d: %s", code, errText)
	}
}

func mustTable(t *testing.T, name string) dialect.Table {
	t.Helper()
	table, err := dialect.NewTable(name)
	if err != nil {
		t.Fatal(err)
	}
	return table
}
