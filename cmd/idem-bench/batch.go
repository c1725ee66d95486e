package main

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/idemkit/idem"
)

// The batch comparison (-batch): what one key costs done one at a time
// with the seed's SQL and with Store.Do, and in batches of N with
// Store.DoBatch, whose function inserts the orders of the keys it won with
// one multi-row INSERT. Every key is new; one client sends them, so the
// figures are the cost of a key, not of contention.

// batchScheme sends reqs (whose request numbers are nums) through
// Store.DoBatch and returns its results.
type batchScheme func(ctx context.Context, reqs []idem.Request, nums []int64) ([]idem.Result, error)

// batchOn returns Store.DoBatch of store as a batchScheme: its function
// inserts one order per won request with one statement (insertMany) and
// answers each with its order's response.
func batchOn[TTx any](store *idem.Store[TTx], insertMany func(ctx context.Context, tx TTx, rows int) error) batchScheme {
	return func(ctx context.Context, reqs []idem.Request, nums []int64) ([]idem.Result, error) {
		num := make(map[string]int64, len(reqs))
		for i, r := range reqs {
			num[r.Key] = nums[i]
		}
		return store.DoBatch(ctx, reqs, func(ctx context.Context, tx TTx, won []idem.Request) ([]idem.Response, error) {
			if err := insertMany(ctx, tx, len(won)); err != nil {
				return nil, err
			}
			resps := make([]idem.Response, len(won))
			for i, r := range won {
				resps[i] = response(num[r.Key])
			}
			return resps, nil
		})
	}
}

// ordersInsertSQL is the INSERT of rows orders into table orders in one
// statement, with numbered placeholders ($1, $2, ...) when dollar, else ?.
func ordersInsertSQL(orders string, rows int, dollar bool) string {
	var b strings.Builder
	b.WriteString(`INSERT INTO ` + orders + ` (customer, item_id) VALUES `)
	for i := range rows {
		if i > 0 {
			b.WriteString(", ")
		}
		if dollar {
			fmt.Fprintf(&b, "($%d, $%d)", 2*i+1, 2*i+2)
		} else {
			b.WriteString("(?, ?)")
		}
	}
	return b.String()
}

// ordersArgs are the arguments of ordersInsertSQL's statement.
func ordersArgs(rows int) []any {
	args := make([]any, 0, 2*rows)
	for range rows {
		args = append(args, customer, itemID)
	}
	return args
}

// sqlInsertMany is the multi-row order INSERT on database/sql.
func sqlInsertMany(orders string, dollar bool) func(ctx context.Context, tx *sql.Tx, rows int) error {
	return func(ctx context.Context, tx *sql.Tx, rows int) error {
		_, err := tx.ExecContext(ctx, ordersInsertSQL(orders, rows, dollar), ordersArgs(rows)...)
		return err
	}
}

// batchWay is one column of the comparison: the seed's SQL or Do one key
// at a time (size 1), or DoBatch with size keys a call.
type batchWay struct {
	name string // "seed", "Do", "DoBatch"
	size int
}

func (w batchWay) String() string {
	if w.name == "DoBatch" {
		return "DoBatch N=" + strconv.Itoa(w.size)
	}
	return w.name
}

// batchResult is the comparison on one target: per way, one cell a round.
// A cell's ops are calls (of size keys each).
type batchResult struct {
	target string
	ways   []batchWay
	cells  [][]*cell
}

// perKey is way i's median over the rounds of keys per second, or false
// when a round failed a request or none was measured.
func (b *batchResult) perKey(i int) (float64, bool) {
	var rates []float64
	for _, c := range b.cells[i] {
		if c.errors > 0 {
			return 0, false
		}
		rates = append(rates, c.throughput()*float64(b.ways[i].size))
	}
	v := median(rates)
	return v, v > 0
}

// batchWays are the columns for the batch sizes of -batch.
func batchWays(sizes []int) []batchWay {
	ways := []batchWay{{"seed", 1}, {"Do", 1}}
	for _, n := range sizes {
		ways = append(ways, batchWay{"DoBatch", n})
	}
	return ways
}

// batchTest measures every way on t with one client, in interleaved
// rounds after a warm-up, each cell bounded by -duration and by -max-ops
// keys.
func batchTest(ctx context.Context, o options, t *target, runID string) (*batchResult, error) {
	res := &batchResult{target: t.name, ways: batchWays(o.batch)}
	res.cells = make([][]*cell, len(res.ways))
	opOf := func(w batchWay, ks keySpace) op {
		if w.name != "DoBatch" {
			send := t.schemes[map[string]string{"seed": schemeSeed, "Do": schemeIdem}[w.name]]
			return func(ctx context.Context, i int64) (idem.Outcome, error) { return send(ctx, request(ks, i, ""), i) }
		}
		return func(ctx context.Context, i int64) (idem.Outcome, error) {
			reqs, nums := make([]idem.Request, w.size), make([]int64, w.size)
			for j := range reqs {
				nums[j] = i*int64(w.size) + int64(j)
				reqs[j] = request(ks, nums[j], "")
			}
			results, err := t.batch(ctx, reqs, nums)
			if err != nil {
				return 0, err
			}
			for j, r := range results {
				if r.Outcome != idem.Won || !r.Committed {
					return 0, fmt.Errorf("DoBatch of %d new keys: key %d is %v (committed %v), want won and committed", w.size, j, r.Outcome, r.Committed)
				}
			}
			return idem.Won, nil
		}
	}
	cellOf := func(w batchWay, r int) *cell {
		ks := newKeySpace(runID, path("batch-"+strings.ReplaceAll(w.String(), " ", "-")), 1, r)
		return measure(ctx, t, 1, o.duration, max(o.maxOps/int64(w.size), 1), opOf(w, ks), nil)
	}
	if o.warmup > 0 {
		for _, w := range res.ways {
			ks := newKeySpace(runID, path("batch-warm-"+strings.ReplaceAll(w.String(), " ", "-")), 1, 0)
			measure(ctx, t, 1, o.warmup, max(o.maxOps/int64(w.size), 1), opOf(w, ks), nil)
		}
	}
	for r := range o.rounds {
		// Rotate the order each round, as the writes' cells do.
		for k := range res.ways {
			if ctx.Err() != nil {
				return res, ctx.Err()
			}
			i := (k + r) % len(res.ways)
			w := res.ways[i]
			c := cellOf(w, r)
			res.cells[i] = append(res.cells[i], c)
			logf("%-14s batch round %d %-15s %8.0f keys/s, %.2f round trips and %.2f statements a key, err %d", t.name, r, w,
				c.throughput()*float64(w.size), perOp(c.wire.roundTrips, c.ops*int64(w.size)), perOp(c.wire.statements, c.ops*int64(w.size)), c.errors)
			if c.firstErr != nil {
				logf("  first error: %v", c.firstErr)
			}
		}
	}
	return res, nil
}

// batchTargetN and batchTargetRatio are the per-key target: DoBatch at N = 100 at least 5 times
// Do's and the seed's keys per second.
const (
	batchTargetN     = 100
	batchTargetRatio = 5
)

// writeBatches prints the comparison: a row per target, keys per second
// and µs per key for every way, and DoBatch's ratios at the largest N.
func writeBatches(w io.Writer, results []*batchResult, o options) {
	if len(results) == 0 {
		return
	}
	ways := results[0].ways
	big := ways[len(ways)-1]
	fmt.Fprintf(w, "### Per key: one at a time and in batches\n\n")
	fmt.Fprintf(w, "One client sends new keys: the seed's SQL (one transaction a key: claim, the order's INSERT, the response's UPDATE), Store.Do (the order's INSERT inside), and Store.DoBatch with N keys a call (one multi-row INSERT of the won keys' orders inside). ")
	fmt.Fprintf(w, "Each cell: keys per second (median of %d rounds of %v, at most %d keys, every way warmed up %v) and µs per key. A way with a failed request shows —. ", o.rounds, o.duration, o.maxOps, o.warmup)
	fmt.Fprintf(w, "The ratios are DoBatch's keys per second at N=%d over Do's and the seed's", big.size)
	if big.size == batchTargetN {
		fmt.Fprintf(w, " (target: ≥ %d ×)", batchTargetRatio)
	}
	fmt.Fprintf(w, ".\n\n| backend |")
	for _, way := range ways {
		fmt.Fprintf(w, " %s |", way)
	}
	fmt.Fprintf(w, " N=%d / Do | N=%d / seed |\n|---|%s\n", big.size, big.size, strings.Repeat("---:|", len(ways)+2))
	for _, b := range results {
		fmt.Fprintf(w, "| %s |", b.target)
		for _, way := range ways {
			if v, ok := b.perKeyOf(way); ok {
				fmt.Fprintf(w, " %.0f/s, %.0f µs |", v, 1e6/v)
			} else {
				fmt.Fprintf(w, " — |")
			}
		}
		for _, of := range []batchWay{{"Do", 1}, {"seed", 1}} {
			x, ok := batchRatio(b, big, of)
			switch {
			case !ok:
				fmt.Fprintf(w, " — |")
			case big.size != batchTargetN:
				fmt.Fprintf(w, " %.1f |", x)
			case x >= batchTargetRatio:
				fmt.Fprintf(w, " %.1f ✓ |", x)
			default:
				fmt.Fprintf(w, " %.1f ✗ |", x)
			}
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w)
	for _, b := range results {
		for _, f := range b.failed() {
			fmt.Fprintf(w, "- %s, %s: %d failed requests (first: %v); its figures are left out.\n", b.target, b.ways[f.way], f.errors, f.first)
		}
	}
	if batchesFailed(results) {
		fmt.Fprintln(w)
	}
}

// batchFailure is a way whose cells had failed requests.
type batchFailure struct {
	way    int
	errors int64
	first  error
}

// failed lists the ways of b with failed requests.
func (b *batchResult) failed() []batchFailure {
	var out []batchFailure
	for i, cells := range b.cells {
		f := batchFailure{way: i}
		for _, c := range cells {
			f.errors += c.errors
			if f.first == nil {
				f.first = c.firstErr
			}
		}
		if f.errors > 0 {
			out = append(out, f)
		}
	}
	return out
}

// batchesFailed is true when any way of results had failed requests.
func batchesFailed(results []*batchResult) bool {
	return slices.ContainsFunc(results, func(b *batchResult) bool { return len(b.failed()) > 0 })
}

// perKeyOf is perKey of way w, or false when b has no such way.
func (b *batchResult) perKeyOf(w batchWay) (float64, bool) {
	i := slices.Index(b.ways, w)
	if i < 0 {
		return 0, false
	}
	return b.perKey(i)
}

// batchRatio is x's keys per second over y's on b, or false when either is
// missing or failed.
func batchRatio(b *batchResult, x, y batchWay) (float64, bool) {
	vx, okx := b.perKeyOf(x)
	vy, oky := b.perKeyOf(y)
	if !okx || !oky {
		return 0, false
	}
	return vx / vy, true
}
