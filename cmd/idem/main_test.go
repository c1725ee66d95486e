package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/dialect"
	"github.com/idemkit/idem/sqlite"
)

// cli runs the command line and returns its exit code, stdout and stderr.
func cli(t *testing.T, terminal bool, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	code := run(ctx, args, &out, &errOut, terminal)
	return code, out.String(), errOut.String()
}

// seed makes records in the SQLite file at path through the library: n
// completed ones claimed at claimed, and one pending (a committed claim).
func seed(t *testing.T, path string, claimed time.Time, prefix string, n int) {
	t.Helper()
	db, err := sqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	d, err := sqlite.New(t.Context(), db, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	store, err := idem.New(d, idem.Config{Clock: func() time.Time { return claimed }})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		req := idem.Request{Scope: prefix + " POST /orders", Key: prefix + "-" + string(rune('a'+i)), Fingerprint: idem.FingerprintRequest("POST", "/orders", nil)}
		if _, err := store.Do(t.Context(), req, func(context.Context, *sql.Tx) (idem.Response, error) {
			return idem.Response{Status: 201, Body: []byte(`{"ok":true}`)}, nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	tx, err := db.BeginTx(t.Context(), nil)
	if err != nil {
		t.Fatal(err)
	}
	req := idem.Request{Scope: prefix + " POST /orders", Key: prefix + "-pending", Fingerprint: idem.FingerprintRequest("POST", "/orders", nil)}
	if c, err := store.Claim(t.Context(), tx, req); err != nil || c.Outcome != idem.Won {
		t.Fatalf("claim: %v %v", c, err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
}

func TestHelp(t *testing.T) {
	code, out, _ := cli(t, false, "help")
	if code != exitOK {
		t.Fatalf("help: exit %d", code)
	}
	for _, c := range commands {
		if !strings.Contains(out, "  "+c.name+" ") {
			t.Errorf("help does not list %s:\n%s", c.name, out)
		}
		code, text, _ := cli(t, false, "help", c.name)
		if code != exitOK || !strings.Contains(text, "Usage: idem "+c.name) || !strings.Contains(text, "Exit codes:") || !strings.Contains(text, "-json") {
			t.Errorf("help %s: exit %d\n%s", c.name, code, text)
		}
		if c.needsDB && (!strings.Contains(text, "-dsn") || !strings.Contains(text, "-table") || !strings.Contains(text, "-timeout")) {
			t.Errorf("help %s lacks the database flags:\n%s", c.name, text)
		}
		if code, _, errText := cli(t, false, c.name, "--help"); code != exitOK || !strings.Contains(errText, "Usage: idem "+c.name) {
			t.Errorf("%s --help: exit %d\n%s", c.name, code, errText)
		}
	}
	unopened := filepath.Join(t.TempDir(), "x.db")
	for _, args := range [][]string{{}, {"frobnicate"}, {"status", "-nope"}, {"status"}, {"inspect", "-dsn", unopened}, {"delete", "-dsn", unopened, "-key", "k"},
		{"status", "-dsn", "redis://x"}, {"list", "-dsn", unopened, "extra"}} {
		if code, _, _ := cli(t, false, args...); code != exitUsage {
			t.Errorf("idem %q: exit %d, want %d", args, code, exitUsage)
		}
	}
	if _, err := os.Stat(unopened); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a usage error opened the database: %s exists (%v)", unopened, err)
	}
}

func TestCommandsOnSQLite(t *testing.T) {
	path := filepath.Join(t.TempDir(), "orders.db")
	dsn := path
	if db, err := sqlite.Open(path); err != nil { // an empty database: status does not create one
		t.Fatal(err)
	} else if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if code, _, errText := cli(t, false, "status", "-dsn", dsn); code != exitPending || !strings.Contains(errText, "run idem migrate") {
		t.Fatalf("status before migrate: exit %d, %s; want %d", code, errText, exitPending)
	}
	table, _ := dialect.NewTable(idem.DefaultTable)
	latest := len(sqlite.NewDialect().Schema(table).Migrations)
	code, out, errText := cli(t, false, "migrate", "-dsn", dsn)
	if code != exitOK || !strings.Contains(out, fmt.Sprintf("0 -> %d", latest)) {
		t.Fatalf("migrate: exit %d: %s %s", code, out, errText)
	}
	if code, out, _ := cli(t, false, "migrate", "-dsn", dsn); code != exitOK || !strings.Contains(out, "up to date") {
		t.Fatalf("migrate again: exit %d: %s", code, out)
	}

	now := time.Now()
	seed(t, path, now.Add(-48*time.Hour), "old", 5) // expired
	seed(t, path, now.Add(-time.Hour), "t1", 3)

	code, out, _ = cli(t, false, "status", "-dsn", dsn, "-json")
	var status struct {
		Version map[string]int `json:"version"`
		Records struct {
			Live    map[string]int64 `json:"live"`
			Expired int64            `json:"expired"`
			Total   int64            `json:"total"`
		} `json:"records"`
	}
	if err := json.Unmarshal([]byte(out), &status); code != exitOK || err != nil {
		t.Fatalf("status -json: exit %d, %v: %s", code, err, out)
	}
	if status.Version["current"] != latest || status.Records.Live["pending"] != 1 || status.Records.Live["completed"] != 3 || status.Records.Expired != 6 || status.Records.Total != 10 {
		t.Errorf("status -json: %+v", status)
	}

	code, out, _ = cli(t, false, "inspect", "-dsn", dsn, "-scope", "t1 POST /orders", "-key", "t1-a", "-json")
	var rec recordJSON
	if err := json.Unmarshal([]byte(out), &rec); code != exitOK || err != nil || rec.State != "completed" || rec.Status != 201 || rec.BodyBytes != 11 || rec.Expired || rec.AgeSeconds < 3500 {
		t.Fatalf("inspect -json: exit %d, %v: %s", code, err, out)
	}
	if code, out, _ := cli(t, false, "inspect", "-dsn", dsn, "-scope", "t1 POST /orders", "-key", "t1-pending"); code != exitOK || !strings.Contains(out, "pending, live") {
		t.Fatalf("inspect: exit %d: %s", code, out)
	}
	if code, _, _ := cli(t, false, "inspect", "-dsn", dsn, "-scope", "t1 POST /orders", "-key", "nope"); code != exitNotFound {
		t.Fatalf("inspect of a missing key: exit %d, want %d", code, exitNotFound)
	}

	// Pages of 2 through the t1 records, following the printed token.
	var keys []string
	after := ""
	for range 5 {
		args := []string{"list", "-dsn", dsn, "-prefix", "t1", "-limit", "2", "-json"}
		if after != "" {
			args = append(args, "-after", after)
		}
		code, out, _ := cli(t, false, args...)
		var page struct {
			Records []recordJSON `json:"records"`
			Next    string       `json:"next"`
		}
		if err := json.Unmarshal([]byte(out), &page); code != exitOK || err != nil {
			t.Fatalf("list: exit %d, %v: %s", code, err, out)
		}
		for _, r := range page.Records {
			keys = append(keys, r.Key)
		}
		if after = page.Next; after == "" {
			break
		}
	}
	if got := strings.Join(keys, ","); got != "t1-a,t1-b,t1-c,t1-pending" {
		t.Errorf("list pages: %s", got)
	}
	code, out, _ = cli(t, false, "list", "-dsn", dsn, "-state", "pending", "-live", "-min-age", "30m")
	if code != exitOK || !strings.Contains(out, "t1-pending") || strings.Contains(out, "old-pending") || strings.Contains(out, "t1-a") {
		t.Errorf("list of stuck keys: exit %d:\n%s", code, out)
	}
	if code, out, _ := cli(t, false, "list", "-dsn", dsn, "-all", "-limit", "3"); code != exitOK || strings.Count(out, "\n") != 10 || strings.Contains(out, "next:") {
		t.Errorf("list -all: exit %d:\n%s", code, out)
	}
	if code, _, _ := cli(t, false, "list", "-dsn", dsn, "-state", "stuck"); code != exitUsage {
		t.Errorf("list -state stuck: exit %d, want %d", code, exitUsage)
	}

	if code, _, errText := cli(t, false, "delete", "-dsn", dsn, "-scope", "t1 POST /orders", "-key", "t1-pending"); code != exitRefused ||
		!strings.Contains(errText, "pending") || !strings.Contains(errText, "-force") || strings.Contains(errText, "ForceDelete") {
		t.Errorf("delete of a live pending record: exit %d, %s; want %d", code, errText, exitRefused)
	}
	if code, out, _ := cli(t, false, "delete", "-dsn", dsn, "-scope", "t1 POST /orders", "-key", "t1-pending", "-force"); code != exitOK || !strings.Contains(out, "deleted") {
		t.Errorf("delete -force: exit %d: %s", code, out)
	}
	if code, _, _ := cli(t, false, "delete", "-dsn", dsn, "-scope", "t1 POST /orders", "-key", "t1-pending"); code != exitNotFound {
		t.Errorf("delete of a deleted key: exit %d, want %d", code, exitNotFound)
	}

	// Purge: plain progress lines off a terminal, then the summary.
	code, out, errText = cli(t, false, "purge", "-dsn", dsn, "-batch", "2", "-duty", "1", "-progress", "1ns", "-json")
	var purged struct {
		Deleted int64 `json:"deleted"`
		Batches int   `json:"batches"`
	}
	if err := json.Unmarshal([]byte(out), &purged); code != exitOK || err != nil || purged.Deleted != 6 || purged.Batches != 4 {
		t.Fatalf("purge -json: exit %d, %v: %s / %s", code, err, out, errText)
	}
	if lines := strings.Count(errText, "\n"); lines != 4 || strings.Contains(errText, "\r") || !strings.Contains(errText, "purge: 6 of ~6 deleted (100%)") {
		t.Errorf("purge progress off a terminal, want 4 plain lines:\n%q", errText)
	}
	if code, out, _ := cli(t, false, "status", "-dsn", dsn, "-json"); code != exitOK || !strings.Contains(out, `"expired": 0`) {
		t.Errorf("status after purge: exit %d: %s", code, out)
	}
}

func TestPurgeProgressOnTerminal(t *testing.T) {
	path := filepath.Join(t.TempDir(), "orders.db")
	seed(t, path, time.Now().Add(-48*time.Hour), "old", 6)
	code, out, errText := cli(t, true, "purge", "-dsn", path, "-batch", "2", "-duty", "1", "-progress", "1ns")
	if code != exitOK || !strings.Contains(out, "purged 7 expired records") {
		t.Fatalf("purge: exit %d: %s", code, out)
	}
	if !strings.Contains(errText, "\rpurge: 2 of ~7 deleted") || !strings.Contains(errText, "\x1b[K") || !strings.HasSuffix(errText, "\n") || strings.Count(errText, "\n") != 1 {
		t.Errorf("progress on a terminal, want one line redrawn in place:\n%q", errText)
	}
}

func TestMigrationFiles(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "db")
	code, out, errText := cli(t, false, "migration-files", "-format", "goose", "-dialect", "postgres", "-table", "my_keys", "-dir", dir)
	if code != exitOK || !strings.Contains(out, "00001_create_table.sql") {
		t.Fatalf("migration-files: exit %d: %s %s", code, out, errText)
	}
	data, err := os.ReadFile(filepath.Join(dir, "00001_create_table.sql"))
	if err != nil || !strings.Contains(string(data), `CREATE TABLE IF NOT EXISTS "my_keys"`) {
		t.Fatalf("written file: %v\n%s", err, data)
	}
	for _, args := range [][]string{
		{"migration-files", "-format", "goose", "-dialect", "oracle", "-dir", dir},
		{"migration-files", "-format", "flyway", "-dialect", "mysql", "-dir", dir},
		{"migration-files", "-format", "goose", "-dialect", "mysql"},
	} {
		if code, _, _ := cli(t, false, args...); code != exitUsage {
			t.Errorf("idem %q: exit %d, want %d", args, code, exitUsage)
		}
	}
}

// TestSchemaNewer: a table migrated by a newer idem is left alone: status and
// migrate exit 6 and say why.
func TestSchemaNewer(t *testing.T) {
	path := filepath.Join(t.TempDir(), "orders.db")
	if code, out, errText := cli(t, false, "migrate", "-dsn", path); code != exitOK {
		t.Fatalf("migrate: exit %d: %s %s", code, out, errText)
	}
	table, _ := dialect.NewTable(idem.DefaultTable)
	schema := sqlite.NewDialect().Schema(table)
	db, err := sqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	next := len(schema.Migrations) + 1
	if _, err := db.ExecContext(t.Context(), schema.RecordVersion, next, "from_the_future"); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	for _, command := range []string{"status", "migrate"} {
		code, _, errText := cli(t, false, command, "-dsn", path)
		if code != exitSchemaNewer || !strings.Contains(errText, "newer") {
			t.Errorf("%s of a newer schema: exit %d, %q; want %d and why", command, code, errText, exitSchemaNewer)
		}
	}
}
