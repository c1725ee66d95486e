package main

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem"
)

// newTestSQLite is the benchmark's SQLite target in a temporary directory.
func newTestSQLite(t *testing.T) *target {
	t.Helper()
	dir, err := os.MkdirTemp("", "idem-bench-test-")
	if err != nil {
		t.Fatal(err)
	}
	tg, err := newSQLiteTarget(dir, 4)
	if err != nil {
		os.RemoveAll(dir)
		t.Fatal(err)
	}
	t.Cleanup(tg.close)
	return tg
}

// countOrders counts the user's rows.
func countOrders(t *testing.T, tg *target) int64 {
	t.Helper()
	var n int64
	if err := tg.db.QueryRowContext(t.Context(), `SELECT COUNT(*) FROM `+tg.orders).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestSchemesOneWinner races every scheme that records a key on SQLite:
// of many requests with one key exactly one wins and writes one order; the
// others replay its response (the seed's SQL as written, idem, and lease
// mode).
func TestSchemesOneWinner(t *testing.T) {
	tg := newTestSQLite(t)
	for _, name := range []string{schemeSeed, schemeIdem, schemeReadFirst, schemeIdemCall, schemeLease, schemeLeaseCall} {
		t.Run(name, func(t *testing.T) {
			send := tg.schemes[name]
			if send == nil {
				t.Fatalf("the SQLite target has no scheme %q", name)
			}
			before := countOrders(t, tg)
			req := request(newKeySpace("race", path(name), 1, 0), 7, "")
			var mu sync.Mutex
			got := map[idem.Outcome]int{}
			var wg sync.WaitGroup
			for range 16 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					out, err := send(t.Context(), req, 7)
					mu.Lock()
					defer mu.Unlock()
					if err != nil {
						t.Errorf("%s: %v", name, err)
						return
					}
					got[out]++
				}()
			}
			wg.Wait()
			if got[idem.Won] != 1 || got[idem.Replay] != 15 {
				t.Fatalf("%s: outcomes %v, want 1 won and 15 replays", name, got)
			}
			if n := countOrders(t, tg) - before; n != 1 {
				t.Fatalf("%s: %d orders written, want 1", name, n)
			}
			// Another body with the same key is a mismatch.
			other := request(newKeySpace("race", path(name), 1, 0), 7, `,"changed":true`)
			if out, err := send(t.Context(), other, 7); err != nil || out != idem.Mismatch {
				t.Fatalf("%s with another body: %v, %v, want mismatch", name, out, err)
			}
		})
	}
}

// TestYardsticksWrite checks that bare, floor, seed and bare-5ms each
// write an order.
func TestYardsticksWrite(t *testing.T) {
	tg := newTestSQLite(t)
	for i, name := range []string{schemeBare, schemeFloor, schemeSeed, schemeBareCall} {
		before := countOrders(t, tg)
		req := request(newKeySpace("write", path(name), 1, 0), int64(i), "")
		out, err := tg.schemes[name](t.Context(), req, int64(i))
		if err != nil || out != idem.Won {
			t.Fatalf("%s: %v, %v, want won", name, out, err)
		}
		if n := countOrders(t, tg) - before; n != 1 {
			t.Fatalf("%s: %d orders, want 1", name, n)
		}
	}
}

// TestSeedRecordsReplayThroughIdem: the seed stores its response the way
// idem does (encodeHeader is idem's format), so idem replays it byte for
// byte, and idem's stored header is what encodeHeader writes.
func TestSeedRecordsReplayThroughIdem(t *testing.T) {
	tg := newTestSQLite(t)
	req := request(newKeySpace("compat", "seed", 1, 0), 42, "")
	if out, err := tg.schemes[schemeSeed](t.Context(), req, 42); err != nil || out != idem.Won {
		t.Fatalf("seed: %v, %v", out, err)
	}
	// Store.Do replays it: the response must be the seed's.
	if out, err := tg.schemes[schemeIdem](t.Context(), req, 42); err != nil || out != idem.Replay {
		t.Fatalf("idem on the seed's key: %v, %v, want replay", out, err)
	}
	db := tg.db
	var header []byte
	if err := db.QueryRowContext(t.Context(), `SELECT header FROM `+tg.keys+` WHERE idem_key = ?`, req.Key).Scan(&header); err != nil {
		t.Fatal(err)
	}
	if want := encodeHeader(response(42).Header); !bytes.Equal(header, want) {
		t.Fatalf("seed's stored header %x, want %x", header, want)
	}
	// And what idem stores is what encodeHeader writes.
	won := request(newKeySpace("compat", "idem", 1, 0), 43, "")
	if out, err := tg.schemes[schemeIdem](t.Context(), won, 43); err != nil || out != idem.Won {
		t.Fatalf("idem: %v, %v", out, err)
	}
	if err := db.QueryRowContext(t.Context(), `SELECT header FROM `+tg.keys+` WHERE idem_key = ?`, won.Key).Scan(&header); err != nil {
		t.Fatal(err)
	}
	if want := encodeHeader(response(43).Header); !bytes.Equal(header, want) {
		t.Fatalf("idem's stored header %x, encodeHeader writes %x", header, want)
	}
	if len(encodeHeader(http.Header{})) != 0 {
		t.Fatal("an empty header must encode as no bytes")
	}
}

func TestInlineValues(t *testing.T) {
	for _, tc := range []struct {
		query string
		args  []any
		want  string
		bad   bool
	}{
		{"SELECT ?, ?, ?", []any{int64(-5), 201, nil}, "SELECT -5, 201, NULL", false},
		{"WHERE k = ?", []any{"a'b"}, "WHERE k = X'612762'", false},
		{"WHERE f = ?", []any{[]byte{0, 0xff}}, "WHERE f = X'00FF'", false},
		{"WHERE f = ?", []any{[]byte{}}, "WHERE f = X''", false},
		{"SELECT ?", nil, "", true},
		{"SELECT 1", []any{1}, "", true},
		{"SELECT ?", []any{1.5}, "", true},
	} {
		got, err := inlineValues(tc.query, tc.args)
		if (err != nil) != tc.bad || got != tc.want {
			t.Errorf("inlineValues(%q, %v) = %q, %v; want %q (error %v)", tc.query, tc.args, got, err, tc.want, tc.bad)
		}
	}
}

// TestFillKeysAscendAndSpread fills a table on SQLite as the scale test
// does: the keys are UUID-long, ascending in load order, spread over
// the key space, and the records live; the purge's fill makes them expired.
func TestFillKeysAscendAndSpread(t *testing.T) {
	tg := newTestSQLite(t)
	table := tg.keys + "_fill"
	if _, err := tg.storeOn(t.Context(), table); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tg.drop(context.Background(), table) })
	var progress []int64
	if err := tg.fill(t.Context(), table, scope, 5000, true, func(n int64) { progress = append(progress, n) }); err != nil {
		t.Fatal(err)
	}
	if err := tg.fill(t.Context(), table, "purge", 10, false, func(int64) {}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(progress, []int64{5000}) {
		t.Fatalf("progress %v, want [5000]", progress)
	}
	rows, err := tg.db.QueryContext(t.Context(), `SELECT idem_key, expires_at > CAST(unixepoch('subsec') * 1000000 AS INTEGER)
		FROM `+table+` WHERE scope = ? ORDER BY idem_key`, scope)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var prev string
	n := 0
	for rows.Next() {
		var key string
		var live bool
		if err := rows.Scan(&key, &live); err != nil {
			t.Fatal(err)
		}
		// In key order the records come in load order: key i ends in i.
		if len(key) != 36 || !strings.HasSuffix(key, fmt.Sprintf("-%023x", n+1)) || !live {
			t.Fatalf("key %d = %q (live %v): want 36 characters in load order, live", n, key, live)
		}
		prev = key
		n++
	}
	if n != 5000 || prev[0] != 'f' {
		t.Fatalf("%d keys, the last %q: want 5000 spread over the key space", n, prev)
	}
	var expired int
	if err := tg.db.QueryRowContext(t.Context(), `SELECT COUNT(*) FROM `+table+`
		WHERE scope = 'purge' AND expires_at < CAST(unixepoch('subsec') * 1000000 AS INTEGER)`).Scan(&expired); err != nil || expired != 10 {
		t.Fatalf("%d expired purge records (%v), want 10", expired, err)
	}
}

// TestBulkLoadAndScaleOnSQLite loads a small scale table and measures
// claims on it, as the scale test does.
func TestBulkLoadAndScaleOnSQLite(t *testing.T) {
	tg := newTestSQLite(t)
	o := options{scaleRows: []int64{3000}, scaleConc: 2, scaleWindow: 200 * time.Millisecond, scaleLimit: time.Minute,
		warmup: 50 * time.Millisecond, maxOps: 1000}
	res, err := scaleTest(t.Context(), o, tg, "t")
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 1 || res[0].loaded != 3000 || res[0].loadErr != nil || res[0].claims == nil || res[0].claims.ops == 0 || res[0].claims.errors != 0 {
		t.Fatalf("scale result %+v, want 3000 loaded and claims measured", res[0])
	}
	if res[0].size.rows < 3000 || res[0].size.tableBytes == 0 {
		t.Fatalf("size %+v, want the loaded table's", res[0].size)
	}
	// The scale table is gone afterwards.
	if _, err := tg.size(context.Background(), tg.keys+"_scale"); err == nil {
		t.Fatal("the scale table outlived the test")
	}
}

func TestPathsHaveSchemes(t *testing.T) {
	tg := newTestSQLite(t)
	for _, d := range pathDefs {
		if tg.schemes[d.scheme] == nil {
			t.Errorf("path %s: the SQLite target has no scheme %q", d.name, d.scheme)
		}
		if d.of != "" {
			if of, ok := defOf(d.of); !ok || of.of != "" {
				t.Errorf("path %s replays %q, which is not a write", d.name, d.of)
			}
		}
	}
	names := allPathNames()
	for _, d := range pathDefs {
		if !slices.Contains(split(names), string(d.name)) {
			t.Errorf("path %s missing from the default list", d.name)
		}
	}
}
