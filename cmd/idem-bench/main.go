// Command idem-bench measures what idem costs next to the write it
// protects: the same write (BEGIN; INSERT an order; COMMIT) bare, with the
// plainest record of its key (floor), with the seed's SQL as written
// (seed) and inside Store.Do, and the paths a retry takes (replay). It runs
// each path at several levels of concurrency in interleaved rounds on
// SQLite, PostgreSQL (pgx, database/sql, database/sql through a connector
// that holds BEGIN back) and MySQL or MariaDB, optionally through a proxy
// that delays every byte on loopback, and prints Markdown tables:
// throughput (median and spread), latency, round trips and statements per
// request (decoded from its own sockets), CPU per request of the client and
// the database container, ratios to the yardsticks, claims on tables of up
// to 10 M records, claims during a purge, writes per request, lease mode
// and queue consumers, and (-batch) the cost of a key one at a time (the
// seed's SQL, Do) and in batches of N (DoBatch). The README's Performance
// section shows how the reports in docs/bench were made;
// docs/bench/alternatives.md records the measurements it once made.
//
// The servers are containers it starts with testcontainers-go (images from
// IDEM_POSTGRES_IMAGE and IDEM_MYSQL_IMAGE) and removes at the end, or the
// servers IDEM_POSTGRES_DSN and IDEM_MYSQL_DSN name; it dials loopback
// only. Every cell is bounded by -duration and -max-ops, the whole run by
// -timeout. A cell with a failed request is excluded from the tables,
// listed, and the command exits with status 1. A quick look:
//
//	go run ./cmd/idem-bench -backends pgx -clients 16 -paths bare,seed,idem,replay -purge-rows 0
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/idemkit/idem"
)

// options are the flags' values (see their usage in main).
type options struct {
	backends, purgeOn, scaleOn                                                                 []string
	clients, batch                                                                             []int
	paths                                                                                      []path
	duration, warmup, purgeWindow, purgeLimit, scaleWindow, scaleLimit, netRTT, timeout        time.Duration
	rounds, purgeRows, purgeConc, purgeRepeat, scaleConc, storm, stormRacers, queue, queueConc int
	maxOps, writesN                                                                            int64
	purgeDuty                                                                                  []float64
	scaleRows                                                                                  []int64
	mysqlParams, out                                                                           string
	allowErrors                                                                                bool
}

// backendNames are the -backends values; any but sqlite may end in
// "+delay" to go through the delaying proxy.
var backendNames = []string{"sqlite", "pgx", "pgsql", "pgsql-lazy", "mysql", "mysql-ip"}

func main() {
	var o options
	listVar(&o.backends, "backends", strings.Join(backendNames, ","), "backends to measure: sqlite, pgx (PostgreSQL, pgx native), pgsql (PostgreSQL, database/sql), pgsql-lazy (database/sql through a connector that holds BEGIN back), mysql (MySQL or MariaDB, -mysql-params), mysql-ip (the same with interpolateParams=true); a networked one with +delay goes through the delaying proxy (-net-rtt)",
		func(b string) (string, error) {
			if base, _ := strings.CutSuffix(b, "+delay"); !slices.Contains(backendNames, base) || b == "sqlite+delay" {
				return "", fmt.Errorf("unknown backend %q", b)
			}
			return b, nil
		})
	listVar(&o.clients, "clients", "1,4,16,64", "levels of concurrent clients", func(s string) (int, error) {
		if n, err := strconv.Atoi(s); err == nil && n >= 1 && n <= 256 {
			return n, nil
		}
		return 0, fmt.Errorf("bad level %q (1 to 256)", s)
	})
	listVar(&o.paths, "paths", defaultPaths, "paths to measure (see the report's list; also lease, lease-5ms, idem-5ms, bare-5ms)", parsePath)
	flag.DurationVar(&o.duration, "duration", 3*time.Second, "length of one cell (one path, one level, one round)")
	flag.DurationVar(&o.warmup, "warmup", time.Second, "unrecorded warm-up of every path per level")
	flag.IntVar(&o.rounds, "rounds", 3, "interleaved rounds per level; the table shows the median and the spread")
	flag.Int64Var(&o.maxOps, "max-ops", 500_000, "most requests in one cell")
	flag.IntVar(&o.purgeRows, "purge-rows", 1_000_000, "expired records to purge while claims run (0: skip)")
	flag.DurationVar(&o.purgeWindow, "purge-window", 5*time.Second, "claim measurement before and after the purge")
	flag.DurationVar(&o.purgeLimit, "purge-timeout", 10*time.Minute, "longest the purge may run")
	flag.IntVar(&o.purgeConc, "purge-clients", 16, "clients claiming while the purge runs")
	listVar(&o.purgeOn, "purge-backends", "sqlite,pgx,mysql", "backends to run the purge test on (pgsql shares pgx's server and dialect)", same)
	listVar(&o.purgeDuty, "purge-duty", "1,0.25", "purge with each of these PurgeDutyCycle values (1: batches back to back)", func(s string) (float64, error) {
		if v, err := strconv.ParseFloat(s, 64); err == nil && v > 0 && v <= 1 {
			return v, nil
		}
		return 0, fmt.Errorf("bad duty cycle %q (above 0, at most 1)", s)
	})
	flag.IntVar(&o.purgeRepeat, "purge-repeat", 1, "run each purge test this many times (fill, settle, purge), to see whether a result repeats")
	listVar(&o.scaleRows, "scale-rows", "", "table sizes for the scale test, e.g. 10000,10000000 (empty: skip)", func(s string) (int64, error) {
		if n, err := strconv.ParseInt(s, 10, 64); err == nil && n >= 1 && n <= 1_000_000_000 {
			return n, nil
		}
		return 0, fmt.Errorf("bad table size %q", s)
	})
	listVar(&o.scaleOn, "scale-backends", "sqlite,pgx,mysql", "backends to run the scale test on", same)
	flag.IntVar(&o.scaleConc, "scale-clients", 16, "clients claiming in the scale test")
	flag.Int64Var(&o.writesN, "writes", 200, "requests of the writes probe (WAL/redo bytes and page writes per request; SQLite at most 100), per path and per scale size (0: skip)")
	flag.DurationVar(&o.scaleWindow, "scale-window", 10*time.Second, "claim measurement per table size")
	flag.DurationVar(&o.scaleLimit, "scale-timeout", 45*time.Minute, "longest one bulk load may run (claims are then measured on what was loaded)")
	flag.IntVar(&o.storm, "storm", 0, "keys of the takeover storm: claimed in lease mode by holders that die, then retried at once (0: skip)")
	flag.IntVar(&o.stormRacers, "storm-clients", 2, "clients retrying each key of the takeover storm")
	listVar(&o.batch, "batch", "", "batch sizes of the per-key comparison, e.g. 1,10,100: one client sends new keys with the seed's SQL, Do, and DoBatch at each size (empty: skip)", func(s string) (int, error) {
		if n, err := strconv.Atoi(s); err == nil && n >= 1 && n <= idem.MaxBatch {
			return n, nil
		}
		return 0, fmt.Errorf("bad batch size %q (1 to %d)", s, idem.MaxBatch)
	})
	flag.IntVar(&o.queue, "queue", 0, "messages the queue test publishes to NATS JetStream (IDEM_NATS_URL, or a container of IDEM_NATS_IMAGE) and consumes, bare and through idemqueue (0: skip)")
	flag.IntVar(&o.queueConc, "queue-clients", 8, "subscriptions consuming the queue test's messages")
	flag.DurationVar(&o.netRTT, "net-rtt", time.Millisecond, "round trip the +delay backends' proxy makes: it measures SELECT 1 through itself and sets its delay each way to reach this")
	flag.StringVar(&o.mysqlParams, "mysql-params", "", "extra go-sql-driver DSN parameters for the mysql backends, e.g. clientFoundRows=true")
	flag.DurationVar(&o.timeout, "timeout", 4*time.Hour, "bound on the whole run")
	flag.StringVar(&o.out, "out", "", "also write the report to this file")
	flag.BoolVar(&o.allowErrors, "allow-errors", false, "exit 0 even when cells had failed requests (they are still excluded)")
	flag.Parse()
	slices.Sort(o.scaleRows)
	if o.rounds < 1 || o.duration <= 0 || o.maxOps < 1 || o.purgeRepeat < 1 || o.stormRacers < 1 || o.queueConc < 1 || o.storm > 100_000 || o.queue > 1_000_000 {
		fatalf("-rounds, -duration, -max-ops, -purge-repeat, -storm-clients and -queue-clients must be positive, -storm at most 100000, -queue at most 1000000")
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	if err := run(ctx, o); err != nil {
		fatalf("%v", err)
	}
}

// listVar defines a flag of comma-separated values, each parsed by parse,
// with the values of def until the flag is given.
func listVar[T any](p *[]T, name, def, usage string, parse func(string) (T, error)) {
	set := func(s string) error {
		*p = nil
		for _, f := range split(s) {
			v, err := parse(f)
			if err != nil {
				return err
			}
			*p = append(*p, v)
		}
		return nil
	}
	if err := set(def); err != nil {
		panic(err)
	}
	if def != "" {
		usage += " (default " + def + ")"
	}
	flag.Func(name, usage, set)
}

func same(s string) (string, error) { return s, nil }

func parsePath(s string) (path, error) {
	if _, ok := defOf(path(s)); !ok {
		return "", fmt.Errorf("unknown path %q (known: %s)", s, allPathNames())
	}
	return path(s), nil
}

func split(s string) []string {
	var out []string
	for _, f := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' }) {
		out = append(out, strings.TrimSpace(f))
	}
	return out
}

func fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "idem-bench: "+format+"\n", args...)
	os.Exit(1)
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
}

// errExcluded: some cells had failed requests.
var errExcluded = errors.New("some cells had failed requests and were excluded (see the report)")

// pingRoundTrip is the median time of 50 trivial round trips.
func pingRoundTrip(ctx context.Context, ping func(ctx context.Context) error) (time.Duration, error) {
	var d []time.Duration
	for range 50 {
		t0 := time.Now()
		if err := ping(ctx); err != nil {
			return 0, err
		}
		d = append(d, time.Since(t0))
	}
	return median(d), nil
}

func run(ctx context.Context, o options) (err error) {
	maxClients := slices.Max(append(slices.Clone(o.clients), o.purgeConc, o.scaleConc))
	conns := maxClients + 4

	srv := &servers{netRTT: o.netRTT, mysqlParams: o.mysqlParams}
	defer func() {
		if cerr := srv.close(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("remove containers and proxies: %w", cerr))
		}
	}()
	var targets []*target
	defer func() {
		for _, t := range targets {
			t.close()
		}
	}()
	for _, b := range o.backends {
		t, terr := srv.newTarget(ctx, b, conns)
		if terr != nil {
			return fmt.Errorf("%s: %w", b, terr)
		}
		t.backend = b
		targets = append(targets, t)
	}

	rep := &report{opts: o, started: time.Now()}
	for _, t := range targets {
		rep.servers = append(rep.servers, t.name+": "+t.server)
	}
	runID := strconv.FormatInt(time.Now().UnixNano()%(1<<40), 36)
	for _, t := range targets {
		terr := errors.Join(benchTarget(ctx, o, t, runID, rep), stormAndQueue(ctx, o, t, srv, runID, rep))
		if len(o.batch) > 0 && ctx.Err() == nil {
			b, berr := batchTest(ctx, o, t, runID)
			rep.batches = append(rep.batches, b)
			terr = errors.Join(terr, berr)
		}
		if terr != nil {
			// Keep what was measured: report it, and the failure.
			terr = fmt.Errorf("%s: %w", t.name, terr)
			logf("%v", terr)
			err = errors.Join(err, terr)
		}
		// Its connections go, so that the next targets on the same server
		// stay within max_connections.
		t.close()
		t.close = func() {}
	}
	var w io.Writer = os.Stdout
	if o.out != "" {
		f, ferr := os.Create(o.out)
		if ferr != nil {
			return ferr
		}
		defer f.Close()
		w = io.MultiWriter(os.Stdout, f)
	}
	rep.write(w)
	if (len(rep.excluded()) > 0 || batchesFailed(rep.batches)) && !o.allowErrors {
		err = errors.Join(err, errExcluded)
	}
	return errors.Join(err, ctx.Err())
}

func (o options) has(p path) bool { return slices.Contains(o.paths, p) }

// completed is the key space and count of a cell's won requests: keys a
// replay sends again.
type completed struct {
	keys keySpace
	n    int64
}

// benchTarget runs every level and round of one target, then the scale
// test and the purge test.
func benchTarget(ctx context.Context, o options, t *target, runID string, rep *report) error {
	var writes, others []pathDef
	for _, d := range pathDefs {
		if !o.has(d.name) {
			continue
		}
		if t.schemes[d.scheme] == nil {
			rep.notes = append(rep.notes, fmt.Sprintf("%s: path %s skipped: no lease mode (its dialect is no dialect.Leaser)", t.name, d.name))
			continue
		}
		if d.of == "" {
			writes = append(writes, d)
		} else {
			others = append(others, d)
		}
	}
	run := func(d pathDef, c, r int, dur time.Duration, done map[path]completed, record bool) {
		ks := newKeySpace(runID, d.name, c, r)
		if !record {
			ks = newKeySpace(runID, d.name+"-warm", c, r)
		}
		var prev completed
		if d.of != "" {
			var ok bool
			if prev, ok = done[d.of]; !ok {
				// The path whose keys this one sends did not run this
				// round: complete some keys with it, unrecorded.
				of, _ := defOf(d.of)
				oks := newKeySpace(runID, d.of+"-feed", c, r)
				cl := measure(ctx, t, c, dur, o.maxOps, ops(t, of, oks, keySpace{}, 0), nil)
				prev = completed{oks, cl.outcomes[idem.Won]}
				done[d.of] = prev
			}
			if prev.n == 0 {
				logf("%-14s %2d clients round %d %-14s skipped: no completed keys to send", t.name, c, r, d.name)
				return
			}
		}
		cl := measure(ctx, t, c, dur, o.maxOps, ops(t, d, ks, prev.keys, prev.n), nil)
		if d.of == "" {
			done[d.name] = completed{ks, cl.outcomes[idem.Won]}
		}
		if !record {
			if cl.errors > 0 {
				logf("%-14s %2d clients warm-up %-14s %d errors, first: %v", t.name, c, d.name, cl.errors, cl.firstErr)
			}
			return
		}
		cl.path, cl.round = d.name, r
		rep.add(cl)
		logf("%-14s %2d clients round %d %-14s %8.0f/s p50 %6.2fms p99 %6.2fms rt %.2f st %.2f cpu %4.0f+%4.0fus err %d",
			t.name, c, r, d.name, cl.throughput(), ms(cl.percentile(.5)), ms(cl.percentile(.99)),
			perOp(cl.wire.roundTrips, cl.ops), perOp(cl.wire.statements, cl.ops),
			usPerOp(cl.clientCPU, cl.ops), usPerOp(cl.serverCPU, cl.ops), cl.errors)
		if cl.firstErr != nil {
			logf("  first error: %v", cl.firstErr)
		}
	}
	for _, c := range o.clients {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		// Warm up every path: fill the pool, prepare statements, leave
		// the first connections' cost out of the numbers.
		warm := map[path]completed{}
		for _, d := range append(slices.Clone(writes), others...) {
			run(d, c, -1, o.warmup, warm, false)
		}
		for r := range o.rounds {
			done := map[path]completed{}
			// Rotate the order of the writes each round, so that none
			// always runs first or after another.
			order := slices.Clone(writes)
			if len(order) > 0 {
				order = append(order[r%len(order):], order[:r%len(order)]...)
			}
			for _, d := range append(order, others...) {
				if ctx.Err() != nil {
					break
				}
				run(d, c, r, o.duration, done, true)
			}
		}
	}
	if o.writesN > 0 && ctx.Err() == nil {
		res, err := writesTest(ctx, o, t, runID)
		rep.writes = append(rep.writes, res...)
		if err != nil {
			return fmt.Errorf("writes probe: %w", err)
		}
	}
	if len(o.scaleRows) > 0 && slices.Contains(o.scaleOn, t.backend) && ctx.Err() == nil {
		res, err := scaleTest(ctx, o, t, runID)
		rep.scale = append(rep.scale, res...)
		if err != nil {
			return fmt.Errorf("scale test: %w", err)
		}
	}
	if o.purgeRows > 0 && slices.Contains(o.purgeOn, t.backend) && ctx.Err() == nil {
		for _, duty := range o.purgeDuty {
			for rep1 := range o.purgeRepeat {
				pr, err := purgeTest(ctx, o, t, runID, duty, rep1)
				if err != nil {
					return fmt.Errorf("purge test: %w", err)
				}
				rep.purges = append(rep.purges, pr)
			}
		}
	}
	return nil
}

// purgeResult is what a purge of many expired records did to claims.
type purgeResult struct {
	target              string
	duty                float64 // 1: Store.Purge back to back
	repeat              int
	rows                int
	fill                time.Duration
	purge               idem.PurgeResult
	purgeErr            error
	took                time.Duration
	before, during, aft *cell
}

// purgeTest fills the idem table with expired records, lets the database
// settle, measures claims, purges while claims run (with Store.Purge, or
// paced to run duty of the time), and measures claims again.
func purgeTest(ctx context.Context, o options, t *target, runID string, duty float64, repeat int) (*purgeResult, error) {
	res := &purgeResult{target: t.name, rows: o.purgeRows, duty: duty, repeat: repeat}
	mode := "Store.Purge, back to back (PurgeDutyCycle 1)"
	if duty < 1 {
		mode = fmt.Sprintf("Store.Purge, PurgeDutyCycle %g", duty)
	}
	logf("%s: inserting %d expired records for %s (run %d of %d)", t.name, o.purgeRows, mode, repeat+1, o.purgeRepeat)
	start := time.Now()
	if err := t.fill(ctx, t.keys, "purge", int64(o.purgeRows), false, func(int64) {}); err != nil {
		return nil, err
	}
	res.fill = time.Since(start)
	if err := t.settle(ctx, t.keys); err != nil {
		return nil, fmt.Errorf("settle: %w", err)
	}
	def, _ := defOf(pathIdem)
	claims := func(name string, dur time.Duration, stop *atomic.Bool) *cell {
		ks := newKeySpace(runID, path(fmt.Sprintf("purge-%s-%g-%d", name, duty, repeat)), o.purgeConc, 0)
		return measure(ctx, t, o.purgeConc, dur, o.maxOps, ops(t, def, ks, keySpace{}, 0), stop)
	}
	claims("warm", o.warmup, nil)
	res.before = claims("before", o.purgeWindow, nil)
	logf("%s: claims before purge %8.0f/s p99 %.2fms", t.name, res.before.throughput(), ms(res.before.percentile(.99)))

	var done atomic.Bool
	finished := make(chan struct{})
	pctx, cancel := context.WithTimeout(ctx, o.purgeLimit)
	defer cancel()
	start = time.Now()
	go func() {
		defer close(finished)
		res.purge, res.purgeErr = t.purge(pctx, duty)
		res.took = time.Since(start)
		done.Store(true)
	}()
	res.during = claims("during", o.purgeLimit, &done)
	<-finished
	logf("%s: %s of %d rows took %v (%d batches, err %v); claims during %8.0f/s p99 %.2fms", t.name, mode,
		res.purge.Deleted, res.took.Round(time.Millisecond), res.purge.Batches, res.purgeErr, res.during.throughput(), ms(res.during.percentile(.99)))
	res.aft = claims("after", o.purgeWindow, nil)
	return res, nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func usPerOp(d time.Duration, ops int64) float64 {
	if ops == 0 {
		return 0
	}
	return float64(d) / float64(time.Microsecond) / float64(ops)
}

func perOp(n, ops int64) float64 {
	if ops == 0 {
		return 0
	}
	return float64(n) / float64(ops)
}
