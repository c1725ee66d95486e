package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/sqlite"
)

// serveDeposits stores records the way a service does: through idemhttp's
// middleware on a ServeMux route, one per tenant and key in sends.
func serveDeposits(t *testing.T, path string, sends map[string]string) {
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
	store, err := idem.New(d, idem.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	mw, err := idemhttp.New(store, idemhttp.Config{Principal: func(r *http.Request) string { return r.Header.Get("X-Tenant") }})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("POST /accounts/{id}/deposits", mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
		w.Write([]byte(`{"deposit":"ok"}`))
	})))
	for key, tenant := range sends {
		req := httptest.NewRequest(http.MethodPost, "/accounts/7/deposits", strings.NewReader(`{"amount":5}`))
		req.Header.Set("X-Tenant", tenant)
		req.Header.Set(idemhttp.HeaderKey, key)
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, req)
		if rec.Code != http.StatusCreated {
			t.Fatalf("POST for %s: %d %s", tenant, rec.Code, rec.Body)
		}
	}
}

// TestScopeOfHTTPRecords: a record the middleware stored is found by the
// principal, method and route it was sent with, and -principal lists one
// tenant's records and no other's.
func TestScopeOfHTTPRecords(t *testing.T) {
	path := filepath.Join(t.TempDir(), "svc.db")
	serveDeposits(t, path, map[string]string{"k-42": "tenant-42", "k-420": "tenant-420", "k-7": "tenant-7"})
	route := "/accounts/{id}/deposits" // the ServeMux pattern without its method

	code, out, errText := cli(t, false, "inspect", "-dsn", path, "-principal", "tenant-42", "-method", "POST", "-route", route, "-key", "k-42", "-json")
	var rec recordJSON
	if err := json.Unmarshal([]byte(out), &rec); code != exitOK || err != nil || rec.Status != http.StatusCreated || rec.Key != "k-42" {
		t.Fatalf("inspect -principal -method -route: exit %d, %v: %s %s", code, err, out, errText)
	}
	if want := idemhttp.Scope("tenant-42", "POST", route); rec.Scope != want {
		t.Errorf("scope %q, want %q", rec.Scope, want)
	}
	if code, _, _ := cli(t, false, "inspect", "-dsn", path, "-scope", rec.Scope, "-key", "k-42"); code != exitOK {
		t.Errorf("inspect -scope of the stored scope: exit %d", code)
	}
	if code, _, _ := cli(t, false, "inspect", "-dsn", path, "-principal", "tenant-7", "-method", "POST", "-route", route, "-key", "k-42"); code != exitNotFound {
		t.Errorf("inspect of tenant-42's key as tenant-7: exit %d, want %d", code, exitNotFound)
	}

	code, out, _ = cli(t, false, "list", "-dsn", path, "-principal", "tenant-42", "-json")
	var page struct {
		Records []recordJSON `json:"records"`
	}
	if err := json.Unmarshal([]byte(out), &page); code != exitOK || err != nil {
		t.Fatalf("list -principal: exit %d, %v: %s", code, err, out)
	}
	if len(page.Records) != 1 || page.Records[0].Key != "k-42" {
		t.Errorf("list -principal tenant-42 = %+v, want k-42 alone (not tenant-420's nor tenant-7's)", page.Records)
	}
	if code, out, _ := cli(t, false, "status", "-dsn", path, "-principal", "tenant-7", "-json"); code != exitOK || !strings.Contains(out, `"total": 1`) {
		t.Errorf("status -principal tenant-7: exit %d: %s", code, out)
	}
}

// TestScopeFlagsUsage: -scope and the trio exclude each other, a part of
// the trio is refused, and nothing is opened for any of them.
func TestScopeFlagsUsage(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "x.db")
	for _, args := range [][]string{
		{"inspect", "-principal", "p", "-method", "POST", "-key", "k"},
		{"inspect", "-principal", "p", "-key", "k"},
		{"delete", "-route", "/x", "-key", "k"},
		{"inspect", "-scope", "s", "-principal", "p", "-method", "POST", "-route", "/x", "-key", "k"},
		{"inspect", "-scope", "s", "-method", "POST", "-key", "k"},
		{"inspect", "-principal", "p", "-method", "", "-route", "/x", "-key", "k"},
		{"inspect", "-principal", "p", "-method", "POST", "-route", "/x"},
		{"list", "-prefix", "x", "-principal", "p"},
		{"status", "-prefix", "x", "-principal", "p"},
	} {
		code, _, errText := cli(t, false, append(args, "-dsn", missing)...)
		if code != exitUsage {
			t.Errorf("idem %q: exit %d (%s), want %d", args, code, errText, exitUsage)
		}
	}
	if _, err := os.Stat(missing); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a usage error opened the database: %v", err)
	}
}

// TestReadCommandsCreateNoFile: a command other than migrate on a SQLite
// path that does not exist fails, says so, and leaves no file behind.
func TestReadCommandsCreateNoFile(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{
		{"status"},
		{"list"},
		{"inspect", "-scope", "s", "-key", "k"},
		{"delete", "-scope", "s", "-key", "k"},
		{"purge"},
	} {
		path := filepath.Join(dir, args[0]+".db")
		for _, dsn := range []string{path, "sqlite:" + path, "file:" + path} {
			code, _, errText := cli(t, false, append(args, "-dsn", dsn)...)
			if code != exitFailure || !strings.Contains(errText, args[0]) {
				t.Errorf("idem %s -dsn %s on a missing file: exit %d (%s), want %d", args[0], dsn, code, errText, exitFailure)
			}
			if !strings.HasPrefix(dsn, "file:") && !strings.Contains(errText, "does not exist") {
				t.Errorf("idem %s -dsn %s: %q does not say the file is missing", args[0], dsn, errText)
			}
			for _, name := range []string{path, path + "-wal", path + "-shm"} {
				if _, err := os.Stat(name); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("idem %s -dsn %s created %s (%v)", args[0], dsn, name, err)
				}
			}
		}
	}
	path := filepath.Join(dir, "new.db")
	if code, _, errText := cli(t, false, "migrate", "-dsn", path); code != exitOK {
		t.Fatalf("migrate of a new file: exit %d: %s", code, errText)
	}
	if code, _, errText := cli(t, false, "status", "-dsn", path); code != exitOK {
		t.Errorf("status once migrated: exit %d: %s", code, errText)
	}
}

// TestInspectLease: inspect's text shows a lease-mode record's token, its
// lease and its last step.
func TestInspectLease(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lease.db")
	db, err := sqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	d, err := sqlite.New(t.Context(), db, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	store, err := idem.New(d, idem.Config{Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	req := idem.Request{Scope: idem.Scope("t", "job"), Key: "k", Fingerprint: idem.FingerprintRequest("POST", "/job", nil)}
	l, err := store.Lease(t.Context(), req)
	if err != nil || l.Outcome != idem.Won {
		t.Fatalf("lease: %v %v", l, err)
	}
	if err := l.RecordStep(t.Context(), "charged", []byte("ch_1"), func(ctx context.Context, tx *sql.Tx) error { return nil }); err != nil {
		t.Fatal(err)
	}
	code, out, errText := cli(t, false, "inspect", "-dsn", path, "-scope", req.Scope, "-key", "k")
	if code != exitOK {
		t.Fatalf("inspect: exit %d: %s", code, errText)
	}
	for _, want := range []string{"token        1", "lease        held until " + l.Until().UTC().Format("2006-01-02"), "step         charged"} {
		if !strings.Contains(out, want) {
			t.Errorf("inspect lacks %q:\n%s", want, out)
		}
	}
	if err := l.Release(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, out, _ := cli(t, false, "inspect", "-dsn", path, "-scope", req.Scope, "-key", "k"); !strings.Contains(out, "lease        released") {
		t.Errorf("inspect of a released lease:\n%s", out)
	}
}
