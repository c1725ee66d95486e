// Command idem-bench measures what idem costs next to the write it
// protects: the same write (BEGIN; INSERT an order; COMMIT) bare, with the
// plainest record of its key (floor), with the seed's SQL as written
// (seed), inside Store.Do and behind the HTTP middleware, and the paths a
// retry takes (replay, mismatch, contended). It runs each path at several
// levels of concurrency in interleaved rounds on SQLite, PostgreSQL (pgx,
// database/sql, database/sql through a connector that holds BEGIN back) and
// MySQL or MariaDB, optionally through a proxy that delays every byte on
// loopback, and prints Markdown tables: throughput (median and spread),
// latency, round trips and statements per request (decoded from its own
// sockets), CPU per request of the client and the database container,
// ratios to the yardsticks, storage per record, claims on tables of up to
// 10 M records and claims during a purge. -plot draws throughput against
// clients. The README's Performance section shows how the reports in
// docs/bench were made; docs/bench/alternatives.md records the
// alternatives to the claim it once measured.
//
// The servers are containers it starts with testcontainers-go (images from
// IDEM_POSTGRES_IMAGE and IDEM_MYSQL_IMAGE) and removes at the end, or the
// servers IDEM_POSTGRES_DSN and IDEM_MYSQL_DSN name; it dials loopback
// only. Every cell is bounded by -duration and -max-ops, the whole run by
// -timeout. A cell with a failed request is excluded from the tables and
// plots, listed, and the command exits with status 1. A quick look:
//
//	go run ./cmd/idem-bench -backends pgx -clients 16 -paths bare,seed,idem,replay -purge-rows 0
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	mysqldriver "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"

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
	purgeRepeat int
	purgeOn     []string
	scaleRows   []int64
	scaleOn     []string
	scaleConc   int
	scaleWindow time.Duration
	scaleLimit  time.Duration
	netRTT      time.Duration
	volumes     bool
	mysqlParams string
	sqliteConns int
	timeout     time.Duration
	out         string
	raw         string
	plot        string
	plotPaths   []path
	allowErrors bool
	cpuProfile  string
}

// backendNames are the -backends values; any but sqlite may end in
// "+delay" to go through the delaying proxy.
var backendNames = []string{"sqlite", "pgx", "pgsql", "pgsql-lazy", "mysql", "mysql-ip"}

func main() {
	var o options
	var backends, clients, paths, purgeOn, scaleRows, scaleOn, plotPaths string
	flag.StringVar(&backends, "backends", "sqlite,pgx,pgsql,pgsql-lazy,mysql,mysql-ip", "backends to measure: sqlite, pgx (PostgreSQL, pgx native), pgsql (PostgreSQL, database/sql), pgsql-lazy (database/sql through a connector that holds BEGIN back), mysql (MySQL or MariaDB, -mysql-params), mysql-ip (the same with interpolateParams=true); a networked one with +delay goes through the delaying proxy (-net-rtt)")
	flag.StringVar(&clients, "clients", "1,4,16,64", "levels of concurrent clients")
	flag.StringVar(&paths, "paths", allPathNames(), "paths to measure (see the report's list)")
	flag.DurationVar(&o.duration, "duration", 3*time.Second, "length of one cell (one path, one level, one round)")
	flag.DurationVar(&o.warmup, "warmup", time.Second, "unrecorded warm-up of every path per level")
	flag.IntVar(&o.rounds, "rounds", 3, "interleaved rounds per level; the table shows the median and the spread")
	flag.Int64Var(&o.maxOps, "max-ops", 500_000, "most requests in one cell")
	flag.IntVar(&o.purgeRows, "purge-rows", 1_000_000, "expired records to purge while claims run (0: skip)")
	flag.DurationVar(&o.purgeWindow, "purge-window", 5*time.Second, "claim measurement before and after the purge")
	flag.DurationVar(&o.purgeLimit, "purge-timeout", 10*time.Minute, "longest the purge may run")
	flag.IntVar(&o.purgeConc, "purge-clients", 16, "clients claiming while the purge runs")
	flag.StringVar(&purgeOn, "purge-backends", "sqlite,pgx,mysql", "backends to run the purge test on (pgsql shares pgx's server and dialect)")
	flag.Float64Var(&o.purgeDuty, "purge-duty", 0.25, "also purge again, paced to run this fraction of the time (0 or 1: skip)")
	flag.BoolVar(&o.purgeB2B, "purge-back-to-back", true, "purge with batches back to back (PurgeDutyCycle 1)")
	flag.IntVar(&o.purgeRepeat, "purge-repeat", 1, "run each purge test this many times (fill, settle, purge), to see whether a result repeats")
	flag.StringVar(&scaleRows, "scale-rows", "", "table sizes for the scale test, e.g. 10000,10000000 (empty: skip)")
	flag.StringVar(&scaleOn, "scale-backends", "sqlite,pgx,mysql", "backends to run the scale test on")
	flag.IntVar(&o.scaleConc, "scale-clients", 16, "clients claiming in the scale test")
	flag.DurationVar(&o.scaleWindow, "scale-window", 10*time.Second, "claim measurement per table size")
	flag.DurationVar(&o.scaleLimit, "scale-timeout", 45*time.Minute, "longest one bulk load may run (claims are then measured on what was loaded)")
	flag.DurationVar(&o.netRTT, "net-rtt", time.Millisecond, "round trip the +delay backends' proxy makes: it measures SELECT 1 through itself and sets its delay each way to reach this")
	flag.BoolVar(&o.volumes, "volumes", true, "keep container databases on a Docker volume instead of the container's own filesystem")
	flag.StringVar(&o.mysqlParams, "mysql-params", "", "extra go-sql-driver DSN parameters for the mysql backends, e.g. clientFoundRows=true")
	flag.IntVar(&o.sqliteConns, "sqlite-conns", 4, "SQLite connection pool size")
	flag.DurationVar(&o.timeout, "timeout", 4*time.Hour, "bound on the whole run")
	flag.StringVar(&o.out, "out", "", "also write the report to this file")
	flag.StringVar(&o.raw, "raw", "", "write every cell (every round) to this CSV file")
	flag.StringVar(&o.plot, "plot", "", "draw throughput against clients per backend into this PNG file")
	flag.StringVar(&plotPaths, "plot-paths", "bare,floor,seed,idem,replay", "paths the plot draws")
	flag.BoolVar(&o.allowErrors, "allow-errors", false, "exit 0 even when cells had failed requests (they are still excluded)")
	flag.StringVar(&o.cpuProfile, "cpuprofile", "", "write the benchmark process's CPU profile to this file")
	flag.Parse()

	for _, b := range split(backends) {
		base, _ := strings.CutSuffix(b, "+delay")
		if !slices.Contains(backendNames, base) || b == "sqlite+delay" {
			fatalf("unknown backend %q", b)
		}
		o.backends = append(o.backends, b)
	}
	o.purgeOn = split(purgeOn)
	o.scaleOn = split(scaleOn)
	for _, s := range split(clients) {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 256 {
			fatalf("bad -clients value %q (1 to 256)", s)
		}
		o.clients = append(o.clients, n)
	}
	for _, s := range split(paths) {
		if _, ok := defOf(path(s)); !ok {
			fatalf("unknown path %q (known: %s)", s, allPathNames())
		}
		o.paths = append(o.paths, path(s))
	}
	for _, s := range split(plotPaths) {
		o.plotPaths = append(o.plotPaths, path(s))
	}
	for _, s := range split(scaleRows) {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n < 1 || n > 1_000_000_000 {
			fatalf("bad -scale-rows value %q", s)
		}
		o.scaleRows = append(o.scaleRows, n)
	}
	slices.Sort(o.scaleRows)
	if o.rounds < 1 || o.duration <= 0 || o.maxOps < 1 || o.purgeRepeat < 1 {
		fatalf("-rounds, -duration, -max-ops and -purge-repeat must be positive")
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

// errExcluded: some cells had failed requests.
var errExcluded = errors.New("some cells had failed requests and were excluded (see the report)")

// servers are the database servers and proxies of a run, started on first
// use and removed at its end.
type servers struct {
	o            options
	pg, my       *server
	pgVia, myVia *delayProxy
	calibrated   map[*delayProxy]bool
}

// start starts a server on first use.
func (s *servers) start(ctx context.Context, slot **server, name string, fn func(context.Context, bool) (*server, error)) (*server, error) {
	if *slot == nil {
		logf("starting %s", name)
		srv, err := fn(ctx, s.o.volumes)
		*slot = srv
		if err != nil {
			return nil, err
		}
	}
	return *slot, nil
}

// proxy returns the delaying proxy to the upstream address, started once
// per server.
func (s *servers) proxy(slot **delayProxy, conns int, upstream func() (string, error)) (*delayProxy, error) {
	if *slot == nil {
		addr, err := upstream()
		if err != nil {
			return nil, err
		}
		p, err := startDelayProxy(addr, 0, 4*conns)
		if err != nil {
			return nil, err
		}
		*slot = p
	}
	return *slot, nil
}

func (s *servers) close() error {
	var errs []error
	for _, p := range []*delayProxy{s.pgVia, s.myVia} {
		if p != nil {
			errs = append(errs, p.Close())
		}
	}
	errs = append(errs, terminateAll(s.pg, s.my))
	return errors.Join(errs...)
}

// newTarget connects backend b (a -backends value).
func (s *servers) newTarget(ctx context.Context, b string, conns int) (*target, error) {
	base, delayed := strings.CutSuffix(b, "+delay")
	suffix := ""
	if delayed {
		suffix = "_delay"
	}
	var (
		t   *target
		err error
		srv *server
	)
	switch base {
	case "sqlite":
		dir, derr := os.MkdirTemp("", "idem-bench-")
		if derr != nil {
			return nil, derr
		}
		t, err = newSQLiteTarget(dir, s.o.sqliteConns)
	case "pgx", "pgsql", "pgsql-lazy":
		if srv, err = s.start(ctx, &s.pg, "PostgreSQL", startPostgres); err != nil {
			return nil, err
		}
		var via *delayProxy
		if delayed {
			via, err = s.proxy(&s.pgVia, conns, func() (string, error) {
				cc, err := pgx.ParseConfig(srv.dsn)
				return net.JoinHostPort(cc.Host, strconv.Itoa(int(cc.Port))), err
			})
			if err != nil {
				return nil, err
			}
		}
		switch base {
		case "pgx":
			t, err = newPgxTarget(srv.dsn, "bench_pgx"+suffix, conns, via)
		case "pgsql":
			t, err = newPgSQLTarget(srv.dsn, "bench_pgsql"+suffix, conns, via, false)
		default:
			t, err = newPgSQLTarget(srv.dsn, "bench_pglazy"+suffix, conns, via, true)
		}
	case "mysql", "mysql-ip":
		if srv, err = s.start(ctx, &s.my, "MySQL", startMySQL); err != nil {
			return nil, err
		}
		var via *delayProxy
		if delayed {
			via, err = s.proxy(&s.myVia, conns, func() (string, error) {
				cfg, err := mysqldriver.ParseDSN(srv.dsn)
				return cfg.Addr, err
			})
			if err != nil {
				return nil, err
			}
		}
		params, prefix := s.o.mysqlParams, "bench_mysql"
		if base == "mysql-ip" {
			params, prefix = strings.TrimPrefix(params+"&interpolateParams=true", "&"), "bench_myip"
		}
		t, err = newMySQLTarget(srv.dsn, params, prefix+suffix, conns, via)
	default:
		return nil, fmt.Errorf("unknown backend %q", b)
	}
	if err != nil {
		return nil, err
	}
	t.backend = b
	if srv != nil {
		t.server += "; " + srv.describe()
		t.serverCPU = srv.cpu()
	}
	if delayed {
		t.name += " +delay"
		via := s.pgVia
		if t.family == "mysql" {
			via = s.myVia
		}
		if !s.calibrated[via] {
			// Once per proxy: the first target through it sets the delay.
			got, err := via.calibrate(s.o.netRTT, func() (time.Duration, error) { return pingRoundTrip(ctx, t.ping) })
			if err != nil {
				t.close()
				return nil, fmt.Errorf("calibrate the delaying proxy: %w", err)
			}
			logf("%s: the proxy delays each way by %v: a round trip takes %.2f ms", t.name, via.Delay().Round(time.Microsecond), ms(got))
			s.calibrated[via] = true
		}
		t.server += fmt.Sprintf("; through a delaying proxy on loopback, +%v each way (set to make a round trip %v)", via.Delay().Round(time.Microsecond), s.o.netRTT)
	}
	if t.ping != nil {
		if rt, err := pingRoundTrip(ctx, t.ping); err == nil {
			t.server += fmt.Sprintf("; one round trip (SELECT 1, median of 50): %.2f ms", ms(rt))
		}
	}
	return t, nil
}

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

	srv := &servers{o: o, calibrated: map[*delayProxy]bool{}}
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
		targets = append(targets, t)
	}

	rep := &report{opts: o, started: time.Now()}
	for _, t := range targets {
		rep.servers = append(rep.servers, t.name+": "+t.server)
	}
	runID := strconv.FormatInt(time.Now().UnixNano()%(1<<40), 36)
	for _, t := range targets {
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
	if o.raw != "" {
		if rerr := rep.writeRaw(o.raw); rerr != nil {
			err = errors.Join(err, rerr)
		}
	}
	if o.plot != "" {
		if perr := rep.plot(o.plot, o.plotPaths); perr != nil {
			err = errors.Join(err, fmt.Errorf("plot: %w", perr))
		} else {
			logf("plot written to %s", o.plot)
		}
	}
	if len(rep.excluded()) > 0 && !o.allowErrors {
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

// benchTarget runs every level and round of one target, then its sizes,
// the scale test and the purge test.
func benchTarget(ctx context.Context, o options, t *target, runID string, rep *report) error {
	var writes, others []pathDef
	for _, d := range pathDefs {
		if !o.has(d.name) || t.schemes[d.scheme] == nil {
			continue
		}
		if d.keys != freshKeys && d.of != "" {
			if of, _ := defOf(d.of); t.schemes[of.scheme] == nil {
				continue
			}
		}
		if d.keys == freshKeys {
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
				cl := measure(ctx, t, c, dur, o.maxOps, ops(t, of, oks, c, keySpace{}, 0))
				prev = completed{oks, cl.outcomes[idem.Won]}
				done[d.of] = prev
			}
			if prev.n == 0 {
				logf("%-14s %2d clients round %d %-14s skipped: no completed keys to send", t.name, c, r, d.name)
				return
			}
		}
		cl := measure(ctx, t, c, dur, o.maxOps, ops(t, d, ks, c, prev.keys, prev.n))
		if d.keys == freshKeys {
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
	sizes, err := t.sizes(ctx, t.keys, t.orders)
	if err != nil {
		logf("%s: sizes: %v", t.name, err)
	}
	rep.sizes = append(rep.sizes, targetSizes{target: t.name, sizes: sizes, keysTable: t.keys})
	if len(o.scaleRows) > 0 && slices.Contains(o.scaleOn, t.backend) && ctx.Err() == nil {
		res, err := scaleTest(ctx, o, t, runID)
		rep.scale = append(rep.scale, res...)
		if err != nil {
			return fmt.Errorf("scale test: %w", err)
		}
	}
	if o.purgeRows > 0 && slices.Contains(o.purgeOn, t.backend) && ctx.Err() == nil {
		var modes []float64
		if o.purgeB2B {
			modes = append(modes, 1)
		}
		if o.purgeDuty > 0 && o.purgeDuty < 1 {
			modes = append(modes, o.purgeDuty)
		}
		for _, duty := range modes {
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
	if err := t.fillExpired(ctx, o.purgeRows); err != nil {
		return nil, err
	}
	res.fill = time.Since(start)
	if err := t.settle(ctx, t.keys); err != nil {
		return nil, fmt.Errorf("settle: %w", err)
	}
	def, _ := defOf(pathIdem)
	claims := func(name string, dur time.Duration, stop *atomic.Bool) *cell {
		ks := newKeySpace(runID, path(fmt.Sprintf("purge-%s-%g-%d", name, duty, repeat)), o.purgeConc, 0)
		return measureUntil(ctx, t, o.purgeConc, dur, o.maxOps, ops(t, def, ks, o.purgeConc, keySpace{}, 0), stop)
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
