package main

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestOrdersInsertSQL(t *testing.T) {
	for _, tc := range []struct {
		rows   int
		dollar bool
		want   string
	}{
		{1, false, `INSERT INTO o (customer, item_id) VALUES (?, ?)`},
		{3, false, `INSERT INTO o (customer, item_id) VALUES (?, ?), (?, ?), (?, ?)`},
		{1, true, `INSERT INTO o (customer, item_id) VALUES ($1, $2)`},
		{3, true, `INSERT INTO o (customer, item_id) VALUES ($1, $2), ($3, $4), ($5, $6)`},
	} {
		if got := ordersInsertSQL("o", tc.rows, tc.dollar); got != tc.want {
			t.Errorf("ordersInsertSQL(%d, %v) = %q, want %q", tc.rows, tc.dollar, got, tc.want)
		}
		if got := len(ordersArgs(tc.rows)); got != 2*tc.rows {
			t.Errorf("ordersArgs(%d) has %d values, want %d", tc.rows, got, 2*tc.rows)
		}
	}
}

// syntheticBatches are comparisons with made-up cells: calls per second
// of each way, one cell a round.
func syntheticBatches() []*batchResult {
	mk := func(target string, calls map[batchWay][]float64, failed batchWay) *batchResult {
		b := &batchResult{target: target, ways: batchWays([]int{1, 10, 100})}
		b.cells = make([][]*cell, len(b.ways))
		for i, w := range b.ways {
			for _, v := range calls[w] {
				c := &cell{target: target, clients: 1, elapsed: time.Second, ops: int64(v)}
				if w == failed {
					c.errors, c.firstErr = 1, errors.New("deadlock")
				}
				b.cells[i] = append(b.cells[i], c)
			}
		}
		return b
	}
	seed, do := batchWay{"seed", 1}, batchWay{"Do", 1}
	n1, n10, n100 := batchWay{"DoBatch", 1}, batchWay{"DoBatch", 10}, batchWay{"DoBatch", 100}
	return []*batchResult{
		// Keys per second: seed 800, Do 1000 (median of 900, 1000,
		// 1100), N=100 8000: 8 × Do, 10 × seed.
		mk("sqlite", map[batchWay][]float64{seed: {800, 700, 900}, do: {1100, 900, 1000}, n1: {500}, n10: {300}, n100: {80, 70, 90}}, batchWay{}),
		// N=100 4000: 4 × Do (below the target), 5 × seed.
		mk("mariadb", map[batchWay][]float64{seed: {800}, do: {1000}, n1: {500}, n10: {300}, n100: {40}}, batchWay{}),
		// The seed's cell failed: no seed figure, no ratio to it.
		mk("postgres/pgx", map[batchWay][]float64{seed: {800}, do: {1000}, n1: {500}, n10: {300}, n100: {100}}, seed),
	}
}

func TestBatchTable(t *testing.T) {
	var b bytes.Buffer
	writeBatches(&b, syntheticBatches(), options{rounds: 3, duration: time.Second, maxOps: 1000})
	out := b.String()
	for _, want := range []string{
		"| backend | seed | Do | DoBatch N=1 | DoBatch N=10 | DoBatch N=100 | N=100 / Do | N=100 / seed |",
		"| sqlite | 800/s, 1250 µs | 1000/s, 1000 µs | 500/s, 2000 µs | 3000/s, 333 µs | 8000/s, 125 µs | 8.0 ✓ | 10.0 ✓ |",
		"| mariadb | 800/s, 1250 µs | 1000/s, 1000 µs | 500/s, 2000 µs | 3000/s, 333 µs | 4000/s, 250 µs | 4.0 ✗ | 5.0 ✓ |",
		"| postgres/pgx | — | 1000/s, 1000 µs | 500/s, 2000 µs | 3000/s, 333 µs | 10000/s, 100 µs | 10.0 ✓ | — |",
		"(target: ≥ 5 ×)",
		"- postgres/pgx, seed: 1 failed requests (first: deadlock)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	if !batchesFailed(syntheticBatches()) || batchesFailed(syntheticBatches()[:2]) {
		t.Error("batchesFailed does not tell the failed seed cell")
	}
	// No batch comparison: no table.
	b.Reset()
	writeBatches(&b, nil, options{})
	if b.Len() != 0 {
		t.Errorf("table without results: %q", b.String())
	}
}

// TestBatchTestOnSQLite runs the comparison briefly on SQLite: every way
// measured without a failed request, and one order per key sent (DoBatch's
// function inserts every won key's order with its one INSERT).
func TestBatchTestOnSQLite(t *testing.T) {
	tg := newTestSQLite(t)
	o := options{batch: []int{1, 10, 100}, rounds: 1, duration: 300 * time.Millisecond, maxOps: 400}
	before := countOrders(t, tg)
	res, err := batchTest(t.Context(), o, tg, "test")
	if err != nil {
		t.Fatal(err)
	}
	var keys int64
	for i, w := range res.ways {
		if len(res.cells[i]) != 1 {
			t.Fatalf("%s: %d cells, want 1", w, len(res.cells[i]))
		}
		c := res.cells[i][0]
		if c.errors > 0 || c.ops == 0 {
			t.Fatalf("%s: %d calls, %d failed: %v", w, c.ops, c.errors, c.firstErr)
		}
		if _, ok := res.perKey(i); !ok {
			t.Errorf("%s: no keys per second", w)
		}
		keys += c.ops * int64(w.size)
	}
	if got := countOrders(t, tg) - before; got != keys {
		t.Errorf("%d orders written for %d keys", got, keys)
	}
}
