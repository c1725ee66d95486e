// Command idem-bench measures what idem costs: the same write (BEGIN; INSERT
// an order; COMMIT) bare and wrapped by idem, through Store.Do and through
// the HTTP middleware (ServeHTTP, no network), and the paths every retry
// takes: a replay, a mismatch, and many clients racing on few keys. It runs
// each path at several levels of concurrency in interleaved rounds against
// SQLite, PostgreSQL (pgx native and database/sql) and MySQL or MariaDB, and
// prints Markdown tables: throughput, p50 and p99 latency, round trips and
// statements per request (decoded from the client's own sockets), CPU time
// per request of the client and of the database container, the ratio to
// the bare write, bytes per million records, and what a purge of a million
// expired records does to claim latency (Store.Purge as is, and paced).
//
// The servers are containers it starts with testcontainers-go (images from
// IDEM_POSTGRES_IMAGE and IDEM_MYSQL_IMAGE, default postgres:17 and
// mysql:8.4; PostgreSQL with fsync on, both with a 1 GB buffer pool, data on
// a Docker volume) and removes at the end, or existing servers named by
// IDEM_POSTGRES_DSN and IDEM_MYSQL_DSN. It dials loopback addresses only.
// Every cell is bounded by -duration and -max-ops, the purge by
// -purge-timeout, the whole run by -timeout.
//
// Without an image registry (stand-in images from scripts/standin/build):
//
//	TESTCONTAINERS_HOST_OVERRIDE=localhost TESTCONTAINERS_RYUK_DISABLED=true \
//	IDEM_POSTGRES_IMAGE=idem-standin/postgres:15 IDEM_MYSQL_IMAGE=idem-standin/mariadb:10.11 \
//	go run ./cmd/idem-bench -clients 1,4,16,64 -duration 3s -rounds 3
//
// A quick look at one backend and one level:
//
//	go run ./cmd/idem-bench -backends pgx -clients 16 -paths bare,idem,replay -purge-rows 0
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/idemkit/idem"
)

type options struct {
	backends    []string
	clients     []int
	paths       []path
	duration    time.Duration
	warmup      time.Duration
	rounds      int
	maxOps      int64
	purgeRows   int
	purgeWindow time.Duration
	purgeLimit  time.Duration
	purgeConc   int
	purgeDuty   float64
	purgeB2B    bool
	purgeOn     []string
	volumes     bool
	mysqlParams string
	sqliteConns int
	timeout     time.Duration
	out         string
	cpuProfile  string
}

func main() {
	var o options
	var backends, clients, paths string
	flag.StringVar(&backends, "backends", "sqlite,pgx,pgsql,mysql", "backends to measure: sqlite, pgx (PostgreSQL, pgx native), pgsql (PostgreSQL, database/sql), mysql (MySQL or MariaDB)")
	flag.StringVar(&clients, "clients", "1,4,16,64", "levels of concurrent clients")
	flag.StringVar(&paths, "paths", "bare,floor,idem,http,idem-rf,replay,replay-rf,mismatch,contended", "paths to measure (floor: bare plus a plain insert of the key; -rf: on a store with Config.ReadFirst)")
	flag.DurationVar(&o.duration, "duration", 3*time.Second, "length of one cell (one path, one level, one round)")
	flag.DurationVar(&o.warmup, "warmup", time.Second, "unrecorded warm-up per level (bare and idem)")
	flag.IntVar(&o.rounds, "rounds", 3, "interleaved rounds per level; the table shows the median")
	flag.Int64Var(&o.maxOps, "max-ops", 500_000, "most requests in one cell")
	flag.IntVar(&o.purgeRows, "purge-rows", 1_000_000, "expired records to purge while claims run (0: skip)")
	flag.DurationVar(&o.purgeWindow, "purge-window", 5*time.Second, "claim measurement before and after the purge")
	flag.DurationVar(&o.purgeLimit, "purge-timeout", 10*time.Minute, "longest the purge may run")
	flag.IntVar(&o.purgeConc, "purge-clients", 16, "clients claiming while the purge runs")
	var purgeOn string
	flag.StringVar(&purgeOn, "purge-backends", "sqlite,pgx,mysql", "backends to run the purge test on (pgsql shares pgx's server and dialect)")
	flag.Float64Var(&o.purgeDuty, "purge-duty", 0.25, "also purge again, paced to run this fraction of the time (0 or 1: skip)")
	flag.BoolVar(&o.purgeB2B, "purge-back-to-back", true, "purge with batches back to back (PurgeDutyCycle 1)")
	flag.BoolVar(&o.volumes, "volumes", true, "keep container databases on a Docker volume instead of the container's own filesystem")
	flag.StringVar(&o.mysqlParams, "mysql-params", "", "extra go-sql-driver DSN parameters, e.g. interpolateParams=true")
	flag.IntVar(&o.sqliteConns, "sqlite-conns", 4, "SQLite connection pool size")
	flag.DurationVar(&o.timeout, "timeout", 2*time.Hour, "bound on the whole run")
	flag.StringVar(&o.out, "out", "", "also write the report to this file")
	flag.StringVar(&o.cpuProfile, "cpuprofile", "", "write the benchmark process's CPU profile to this file")
	flag.Parse()

	o.backends = split(backends)
	o.purgeOn = split(purgeOn)
	for _, s := range split(clients) {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 256 {
			fatalf("bad -clients value %q (1 to 256)", s)
		}
		o.clients = append(o.clients, n)
	}
	for _, s := range split(paths) {
		if !slices.Contains(allPaths, path(s)) {
			fatalf("unknown path %q", s)
		}
		o.paths = append(o.paths, path(s))
	}
	if o.rounds < 1 || o.duration <= 0 || o.maxOps < 1 {
		fatalf("-rounds, -duration and -max-ops must be positive")
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	if o.cpuProfile != "" {
		f, err := os.Create(o.cpuProfile)
		if err != nil {
			fatalf("%v", err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			fatalf("%v", err)
		}
		defer pprof.StopCPUProfile()
	}
	if err := run(ctx, o); err != nil {
		pprof.StopCPUProfile()
		fatalf("%v", err)
	}
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

func run(ctx context.Context, o options) (err error) {
	maxClients := slices.Max(append(slices.Clone(o.clients), o.purgeConc))
	conns := maxClients + 4

	var pg, my *server
	defer func() {
		if terr := terminateAll(pg, my); terr != nil {
			err = errors.Join(err, fmt.Errorf("remove containers: %w", terr))
		}
	}()
	var targets []*target
	defer func() {
		for _, t := range targets {
			t.close()
		}
	}()
	for _, b := range o.backends {
		var t *target
		var terr error
		switch b {
		case "sqlite":
			dir, derr := os.MkdirTemp("", "idem-bench-")
			if derr != nil {
				return derr
			}
			t, terr = newSQLiteTarget(dir, o.sqliteConns)
		case "pgx", "pgsql":
			if pg == nil {
				logf("starting PostgreSQL")
				if pg, terr = startPostgres(ctx, o.volumes); terr != nil {
					return terr
				}
			}
			if b == "pgx" {
				t, terr = newPgxTarget(pg.dsn, conns)
			} else {
				t, terr = newPgSQLTarget(pg.dsn, conns)
			}
			if terr == nil {
				t.server += "; " + pg.describe()
				t.serverCPU = pg.cpu()
			}
		case "mysql":
			logf("starting MySQL")
			if my, terr = startMySQL(ctx, o.volumes); terr != nil {
				return terr
			}
			t, terr = newMySQLTarget(my.dsn, o.mysqlParams, conns)
			if terr == nil {
				t.server += "; " + my.describe()
				t.serverCPU = my.cpu()
			}
		default:
			return fmt.Errorf("unknown backend %q", b)
		}
		if terr != nil {
			return fmt.Errorf("%s: %w", b, terr)
		}
		targets = append(targets, t)
	}

	rep := &report{opts: o, started: time.Now()}
	for _, t := range targets {
		rep.servers = append(rep.servers, t.name+": "+t.server)
	}
	runID := strconv.FormatInt(time.Now().UnixNano()%(1<<40), 36)
	for i, t := range targets {
		o := o
		if !slices.Contains(o.purgeOn, o.backends[i]) {
			o.purgeRows = 0
		}
		if terr := benchTarget(ctx, o, t, runID, rep); terr != nil {
			// Keep what was measured: report it, and the failure.
			terr = fmt.Errorf("%s: %w", t.name, terr)
			logf("%v", terr)
			err = errors.Join(err, terr)
		}
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
	return errors.Join(err, ctx.Err())
}

func (o options) has(p path) bool { return slices.Contains(o.paths, p) }

// benchTarget runs every level and round of one target, then its sizes and
// the purge test.
func benchTarget(ctx context.Context, o options, t *target, runID string, rep *report) error {
	for _, c := range o.clients {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		// Warm up: fill the pool, prepare statements, leave the first
		// connections' cost out of the numbers.
		for _, p := range []path{pathBare, pathIdem} {
			measure(ctx, t, c, o.warmup, o.maxOps, ops(t, p, newKeySpace(runID, "warm"+p, c, 0), c, keySpace{}, 0))
		}
		writes := []path{pathBare, pathFloor, pathIdem, pathIdemRF}
		if t.handler != nil {
			writes = append(writes, pathHTTP)
		}
		writes = slices.DeleteFunc(writes, func(p path) bool { return !o.has(p) })
		for r := range o.rounds {
			var doneKeys keySpace
			var doneN int64
			// Rotate the order of the writes each round, so that none
			// always runs first or after another.
			order := append(slices.Clone(writes[r%len(writes):]), writes[:r%len(writes)]...)
			for _, p := range append(order, pathReplay, pathReplayRF, pathMismatch, pathContended) {
				if !o.has(p) || ctx.Err() != nil {
					continue
				}
				if (p == pathReplay || p == pathReplayRF || p == pathMismatch) && doneN == 0 {
					continue
				}
				ks := newKeySpace(runID, p, c, r)
				cl := measure(ctx, t, c, o.duration, o.maxOps, ops(t, p, ks, c, doneKeys, doneN))
				cl.path, cl.round = p, r
				if p == pathIdem {
					doneKeys, doneN = ks, cl.outcomes[idem.Won]
				}
				rep.add(cl)
				logf("%-14s %2d clients round %d %-9s %8.0f/s p50 %6.2fms p99 %6.2fms rt %.2f st %.2f cpu %4.0f+%4.0fus err %d",
					t.name, c, r, p, cl.throughput(), ms(cl.percentile(.5)), ms(cl.percentile(.99)),
					perOp(cl.wire.roundTrips, cl.ops), perOp(cl.wire.statements, cl.ops),
					usPerOp(cl.clientCPU, cl.ops), usPerOp(cl.serverCPU, cl.ops), cl.errors)
				if cl.firstErr != nil {
					logf("  first error: %v", cl.firstErr)
				}
			}
		}
	}
	sizes, err := t.sizes(ctx)
	if err != nil {
		logf("%s: sizes: %v", t.name, err)
	}
	rep.sizes = append(rep.sizes, targetSizes{target: t.name, sizes: sizes, keysTable: t.keys})
	if o.purgeRows > 0 && ctx.Err() == nil {
		var modes []float64
		if o.purgeB2B {
			modes = append(modes, 1)
		}
		if o.purgeDuty > 0 && o.purgeDuty < 1 {
			modes = append(modes, o.purgeDuty)
		}
		for _, duty := range modes {
			pr, err := purgeTest(ctx, o, t, runID, duty)
			if err != nil {
				return fmt.Errorf("purge test: %w", err)
			}
			rep.purges = append(rep.purges, pr)
		}
	}
	return nil
}

// purgeResult is what a purge of many expired records did to claims.
type purgeResult struct {
	target              string
	duty                float64 // 1: Store.Purge
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
func purgeTest(ctx context.Context, o options, t *target, runID string, duty float64) (*purgeResult, error) {
	res := &purgeResult{target: t.name, rows: o.purgeRows, duty: duty}
	mode := "Store.Purge, back to back (PurgeDutyCycle 1)"
	if duty < 1 {
		mode = fmt.Sprintf("Store.Purge, PurgeDutyCycle %g", duty)
	}
	logf("%s: inserting %d expired records for %s", t.name, o.purgeRows, mode)
	start := time.Now()
	if err := t.fillExpired(ctx, o.purgeRows); err != nil {
		return nil, err
	}
	res.fill = time.Since(start)
	if err := t.settle(ctx); err != nil {
		return nil, fmt.Errorf("settle: %w", err)
	}
	claims := func(name string, dur time.Duration, stop *atomic.Bool) *cell {
		ks := newKeySpace(runID, path(fmt.Sprintf("purge-%s-%g", name, duty)), o.purgeConc, 0)
		return measureUntil(ctx, t, o.purgeConc, dur, o.maxOps, ops(t, pathIdem, ks, o.purgeConc, keySpace{}, 0), stop)
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
