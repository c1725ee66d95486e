package main

import (
	"fmt"
	"io"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/idemkit/idem"
)

// report collects the cells of a run and prints them as Markdown. Every
// table comes from this one run.
type report struct {
	opts    options
	started time.Time
	servers []string
	cells   []*cell
	scale   []*scaleResult
	purges  []*purgeResult
	writes  []*writesResult
	batches []*batchResult
	notes   []string // what was skipped, and the checks of the storms
}

func (r *report) add(c *cell) { r.cells = append(r.cells, c) }

// summary is the median over rounds of one target, level and path.
type summary struct {
	target   string
	clients  int
	path     path
	rounds   int
	tput     float64
	tmin     float64
	tmax     float64
	p50, p99 time.Duration
	rt, st   float64
	// client and server CPU per request, in microseconds
	cpuC, cpuS float64
	ops        int64
	errors     int64
	firstErr   error
	outcomes   [5]int64
}

// usable is true when the summary's throughput may be compared: measured,
// and no request failed.
func (s *summary) usable() bool { return s != nil && s.errors == 0 && s.tput > 0 }

// spread is the range of the rounds' throughput relative to the median.
func (s *summary) spread() float64 {
	if s.tput == 0 {
		return 0
	}
	return (s.tmax - s.tmin) / s.tput
}

func median[T int64 | float64 | time.Duration](v []T) T {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// targets lists the targets in the order they were measured.
func (r *report) targets() []string {
	var out []string
	for _, c := range r.cells {
		if !slices.Contains(out, c.target) {
			out = append(out, c.target)
		}
	}
	return out
}

func pathIndex(p path) int {
	return slices.IndexFunc(pathDefs, func(d pathDef) bool { return d.name == p })
}

func (r *report) summaries() []*summary {
	var out []*summary
	type acc struct {
		tput     []float64
		p50, p99 []time.Duration
		wire     counts
		cpuC     time.Duration
		cpuS     time.Duration
	}
	accs := map[*summary]*acc{}
	for _, c := range r.cells {
		s := find(out, c.target, c.clients, c.path)
		if s == nil {
			s = &summary{target: c.target, clients: c.clients, path: c.path}
			out = append(out, s)
			accs[s] = &acc{}
		}
		a := accs[s]
		s.rounds++
		s.ops += c.ops
		s.errors += c.errors
		if s.firstErr == nil {
			s.firstErr = c.firstErr
		}
		for i, n := range c.outcomes {
			s.outcomes[i] += n
		}
		a.tput = append(a.tput, c.throughput())
		a.p50 = append(a.p50, c.percentile(.5))
		a.p99 = append(a.p99, c.percentile(.99))
		a.wire.roundTrips += c.wire.roundTrips
		a.wire.statements += c.wire.statements
		a.wire.opaque = a.wire.opaque || c.wire.opaque
		a.cpuC += c.clientCPU
		a.cpuS += c.serverCPU
	}
	for s, a := range accs {
		s.tput, s.p50, s.p99 = median(a.tput), median(a.p50), median(a.p99)
		s.tmin, s.tmax = slices.Min(a.tput), slices.Max(a.tput)
		s.rt, s.st = perOp(a.wire.roundTrips, s.ops), perOp(a.wire.statements, s.ops)
		s.cpuC, s.cpuS = usPerOp(a.cpuC, s.ops), usPerOp(a.cpuS, s.ops)
		if a.wire.opaque {
			s.st = -1
		}
	}
	order := r.targets()
	slices.SortStableFunc(out, func(a, b *summary) int {
		if x, y := slices.Index(order, a.target), slices.Index(order, b.target); x != y {
			return x - y
		}
		if a.clients != b.clients {
			return a.clients - b.clients
		}
		return pathIndex(a.path) - pathIndex(b.path)
	})
	return out
}

// find returns the summary of target, level and path, or nil.
func find(all []*summary, target string, clients int, p path) *summary {
	for _, s := range all {
		if s.target == target && s.clients == clients && s.path == p {
			return s
		}
	}
	return nil
}

// ratio is x's throughput over y's, or false when either is missing or
// excluded.
func ratio(x, y *summary) (float64, bool) {
	if !x.usable() || !y.usable() {
		return 0, false
	}
	return x.tput / y.tput, true
}

func (r *report) onWire(target string) bool {
	return !strings.HasPrefix(target, "sqlite")
}

func (r *report) write(w io.Writer) {
	o := r.opts
	fmt.Fprintf(w, "## idem-bench results\n\n")
	fmt.Fprintf(w, "Run %s, %s, Go %s %s/%s, %d CPUs. Cells of %v (at most %d requests), %d interleaved rounds per level, median shown with the spread of the rounds; every path warmed up %v per level. Every figure below is from this run.\n\n",
		r.started.Format(time.RFC3339), time.Since(r.started).Round(time.Second), runtime.Version(), runtime.GOOS, runtime.GOARCH, runtime.NumCPU(),
		o.duration, o.maxOps, o.rounds, o.warmup)
	for _, s := range r.servers {
		fmt.Fprintf(w, "- %s\n", s)
	}
	fmt.Fprintln(w)
	all := r.summaries()
	if len(all) > 0 {
		r.writePaths(w, all)
	}
	r.writeExcluded(w)
	writeBatches(w, r.batches, r.opts)
	r.writeWrites(w)
	r.writeScale(w)
	r.writePurges(w)
	if len(r.notes) > 0 {
		fmt.Fprintf(w, "### Notes\n\n- %s\n\n", strings.Join(r.notes, "\n- "))
	}
}

// writePaths prints the paths measured, their throughput and latency, and
// their ratios against the targets.
func (r *report) writePaths(w io.Writer, all []*summary) {
	fmt.Fprintf(w, "### Paths\n\n")
	for _, d := range pathDefs {
		if slices.ContainsFunc(all, func(s *summary) bool { return s.path == d.name }) {
			fmt.Fprintf(w, "- **%s**: %s.\n", d.name, d.about)
		}
	}
	fmt.Fprintln(w)

	fmt.Fprintf(w, "### Throughput and latency\n\n")
	fmt.Fprintf(w, "Spread: (highest − lowest round) / median. RT/req: round trips per request counted on the client's sockets (SQLite runs in-process: none). ")
	fmt.Fprintf(w, "Stmts/req: statements the server executed per request, BEGIN and COMMIT included. ")
	fmt.Fprintf(w, "CPU µs/req: CPU time of the benchmark process (the client; for SQLite also the database) and of the database container, per request. ")
	fmt.Fprintf(w, "vs bare: throughput divided by the bare write's at the same level. Failed requests do not count; a cell with any is excluded (its ratio shows —).\n\n")
	fmt.Fprintf(w, "| backend | clients | path | req/s | spread | p50 ms | p99 ms | RT/req | stmts/req | CPU µs/req client+db | vs bare | outcomes |\n")
	fmt.Fprintf(w, "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---|\n")
	for _, s := range all {
		rt := "—"
		if r.onWire(s.target) {
			rt = fmt.Sprintf("%.2f", s.rt)
		}
		st := fmt.Sprintf("%.2f", s.st)
		if s.st < 0 {
			st = "n/a"
		}
		cpu := fmt.Sprintf("%.0f", s.cpuC)
		if s.cpuS > 0 {
			cpu += fmt.Sprintf(" + %.0f", s.cpuS)
		}
		vs := "—"
		if x, ok := ratio(s, find(all, s.target, s.clients, pathBare)); ok && s.path != pathBare {
			vs = fmt.Sprintf("%.2f", x)
		}
		tput := fmt.Sprintf("%.0f", s.tput)
		if !s.usable() {
			tput = "excluded"
		}
		fmt.Fprintf(w, "| %s | %d | %s | %s | %.0f%% | %.2f | %.2f | %s | %s | %s | %s | %s |\n",
			s.target, s.clients, s.path, tput, 100*s.spread(), ms(s.p50), ms(s.p99), rt, st, cpu, vs, outcomes(s))
	}
	fmt.Fprintln(w)

	r.writeTargets(w, all)
}

func outcomes(s *summary) string {
	var parts []string
	for _, o := range []idem.Outcome{idem.Won, idem.Replay, idem.Mismatch, idem.InFlight} {
		if n := s.outcomes[o]; n > 0 && o != expected(s.path) {
			parts = append(parts, fmt.Sprintf("%s %d", o, n))
		}
	}
	if s.errors > 0 {
		parts = append(parts, fmt.Sprintf("**%d errors** (%v)", s.errors, s.firstErr))
	}
	return strings.Join(parts, ", ")
}

// writeTargets compares the ratios with the targets.
func (r *report) writeTargets(w io.Writer, all []*summary) {
	fmt.Fprintf(w, "### Against the targets\n\n")
	fmt.Fprintf(w, "Throughput ratios at each level, from the table above. ✓/✗ mark the targets: idem ≥ seed at every level; idem ≥ 0.9 × floor at 16 clients; a default replay ≥ 1.5 × bare at 16 and 64; a ReadFirst replay ≥ 4 × bare at 16. ")
	fmt.Fprintf(w, "The +delay backends are the network-bound figures (idem / bare ≥ 0.85 at one client for database/sql through postgres.HoldBegin, postgres/sql-lazy+delay).\n\n")
	// A column with a target marks it, at the levels of at (every level
	// when nil).
	type col struct {
		head   string
		x, y   path
		target float64
		at     []int
	}
	cols := []col{
		{"idem / bare", pathIdem, pathBare, 0, nil},
		{"idem / seed (≥ 1)", pathIdem, pathSeed, 1, nil},
		{"idem / floor (≥ 0.9 at 16)", pathIdem, pathFloor, 0.9, []int{16}},
		{"seed / floor", pathSeed, pathFloor, 0, nil},
		{"idem-rf / idem", pathIdemRF, pathIdem, 0, nil},
		{"replay / bare (≥ 1.5 at 16, 64)", pathReplay, pathBare, 1.5, []int{16, 64}},
		{"replay-claim / bare", pathReplayClaim, pathBare, 0, nil},
		{"seed-replay / bare", pathSeedReplay, pathBare, 0, nil},
		{"replay-rf / bare (≥ 4 at 16)", pathReplayRF, pathBare, 4, []int{16}},
		{"lease / idem", pathLease, pathIdem, 0, nil},
		{"lease-5ms / idem-5ms", pathLeaseCall, pathIdemCall, 0, nil},
		{"lease-5ms / bare-5ms", pathLeaseCall, pathBareCall, 0, nil},
	}
	// Only the columns this run has.
	cols = slices.DeleteFunc(cols, func(c col) bool {
		return !slices.ContainsFunc(all, func(s *summary) bool { return s.path == c.x }) ||
			!slices.ContainsFunc(all, func(s *summary) bool { return s.path == c.y })
	})
	if len(cols) == 0 {
		return
	}
	fmt.Fprintf(w, "| backend | clients |")
	for _, c := range cols {
		fmt.Fprintf(w, " %s |", c.head)
	}
	fmt.Fprintf(w, "\n|---|---:|%s\n", strings.Repeat("---:|", len(cols)))
	for _, t := range r.targets() {
		for _, n := range r.opts.clients {
			fmt.Fprintf(w, "| %s | %d |", t, n)
			for _, c := range cols {
				v, ok := ratio(find(all, t, n, c.x), find(all, t, n, c.y))
				if !ok {
					fmt.Fprintf(w, " — |")
					continue
				}
				mark := ""
				switch {
				case c.target == 0 || c.at != nil && !slices.Contains(c.at, n):
				case v >= c.target:
					mark = " ✓"
				default:
					mark = " ✗"
				}
				fmt.Fprintf(w, " %.2f%s |", v, mark)
			}
			fmt.Fprintln(w)
		}
	}
	fmt.Fprintln(w)
}

// excluded are the summaries with failed requests.
func (r *report) excluded() []*summary {
	return slices.DeleteFunc(r.summaries(), func(s *summary) bool { return s.errors == 0 })
}

func (r *report) writeExcluded(w io.Writer) {
	bad := r.excluded()
	if len(bad) == 0 {
		return
	}
	fmt.Fprintf(w, "### Excluded cells\n\nThese cells had failed requests; they are left out of every ratio.\n\n")
	fmt.Fprintf(w, "| backend | clients | path | failed | succeeded | first error |\n|---|---:|---|---:|---:|---|\n")
	for _, s := range bad {
		fmt.Fprintf(w, "| %s | %d | %s | %d | %d | %v |\n", s.target, s.clients, s.path, s.errors, s.ops, s.firstErr)
	}
	fmt.Fprintln(w)
}

func (r *report) writeScale(w io.Writer) {
	if len(r.scale) == 0 {
		return
	}
	fmt.Fprintf(w, "### Claims on a large table\n\n")
	fmt.Fprintf(w, "Each size is a table of its own, loaded on the server with completed, live records (keys spread evenly over the key space, in key order: INSERT ... SELECT over a series of numbers, 100,000 rows per statement), then settled (PostgreSQL VACUUM and CHECKPOINT, InnoDB ANALYZE and 10 s, SQLite a WAL checkpoint); then %d clients claim new random keys through Store.Do for %v after a warm-up. ", r.opts.scaleConc, r.opts.scaleWindow)
	fmt.Fprintf(w, "Sizes are the loaded table's after the claims (an in-order load packs pages fuller than organic growth: a lower bound). Change: against the smallest size of the same backend (target: ≤ +20%%).\n\n")
	fmt.Fprintf(w, "| backend | records | load | rows/s | claims/s | p50 ms | p99 ms | p50 / p99 change | table B/record | indexes B/record |\n")
	fmt.Fprintf(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	base := map[string]*scaleResult{}
	for _, s := range r.scale {
		if s.claims == nil {
			continue
		}
		b := base[s.target]
		if b == nil {
			base[s.target], b = s, s
		}
		load := s.load.Round(100 * time.Millisecond).String()
		if s.loadErr != nil {
			load += fmt.Sprintf(" (stopped at %d of %d: %v)", s.loaded, s.want, s.loadErr)
		}
		rate := 0.0
		if s.load > 0 {
			rate = float64(s.loaded) / s.load.Seconds()
		}
		change := "—"
		if b != s && b.claims.percentile(.5) > 0 && b.claims.percentile(.99) > 0 {
			change = fmt.Sprintf("%+.0f%% / %+.0f%%", 100*(float64(s.claims.percentile(.5))/float64(b.claims.percentile(.5))-1),
				100*(float64(s.claims.percentile(.99))/float64(b.claims.percentile(.99))-1))
		}
		tb, ib := "—", "—"
		if s.size.rows > 0 {
			tb = fmt.Sprintf("%.0f", float64(s.size.tableBytes)/float64(s.size.rows))
			ib = fmt.Sprintf("%.0f", float64(s.size.indexBytes)/float64(s.size.rows))
		}
		tput := fmt.Sprintf("%.0f", s.claims.throughput())
		if s.claims.errors > 0 {
			tput += fmt.Sprintf(" (**%d errors**: %v)", s.claims.errors, s.claims.firstErr)
		}
		fmt.Fprintf(w, "| %s | %d | %s | %.0f | %s | %.2f | %.2f | %s | %s | %s |\n", s.target, s.loaded, load, rate,
			tput, ms(s.claims.percentile(.5)), ms(s.claims.percentile(.99)), change, tb, ib)
	}
	fmt.Fprintln(w)
}

func (r *report) writePurges(w io.Writer) {
	if len(r.purges) == 0 {
		return
	}
	fmt.Fprintf(w, "### Purge of expired records while claims run\n\n")
	fmt.Fprintf(w, "Expired records inserted in bulk (then the database settles: PostgreSQL VACUUM and CHECKPOINT, InnoDB 10 s, SQLite a WAL checkpoint), then purged in batches of %d while %d clients claim new keys through Do. ", idem.DefaultPurgeBatch, r.opts.purgeConc)
	fmt.Fprintf(w, "Store.Purge ran with PurgeDutyCycle 1 (batches back to back, the rows marked Store.Purge) and/or with the given duty cycle (the default is 0.25: a pause after each batch, so that it purges only that fraction of the time), each %d time(s). ", r.opts.purgeRepeat)
	fmt.Fprintf(w, "Claims are measured for %v before, during the whole purge, and %v after.\n\n", r.opts.purgeWindow, r.opts.purgeWindow)
	fmt.Fprintf(w, "| backend | purge | run | expired rows | purge time | rows/s | claims/s before / during / after | claim p99 ms before / during / after | p99 change |\n")
	fmt.Fprintf(w, "|---|---|---:|---:|---:|---:|---|---|---:|\n")
	// Runs of one backend and duty cycle are adjacent: each group ends in
	// a line of how many stayed within +20 %.
	var groups []string
	within, runs := 0, 0
	for i, p := range r.purges {
		rate := 0.0
		if p.took > 0 {
			rate = float64(p.purge.Deleted) / p.took.Seconds()
		}
		took := p.took.Round(10 * time.Millisecond).String()
		if p.purgeErr != nil {
			took += fmt.Sprintf(" (stopped: %v)", p.purgeErr)
		}
		change := float64(p.during.percentile(.99))/float64(max(p.before.percentile(.99), 1)) - 1
		mode := "Store.Purge"
		if p.duty < 1 {
			mode = fmt.Sprintf("paced, %.0f%% duty", 100*p.duty)
		}
		fmt.Fprintf(w, "| %s | %s | %d | %d | %s | %.0f | %.0f / %.0f / %.0f | %.2f / %.2f / %.2f | %+.0f%% |\n",
			p.target, mode, p.repeat+1, p.purge.Deleted, took, rate,
			p.before.throughput(), p.during.throughput(), p.aft.throughput(),
			ms(p.before.percentile(.99)), ms(p.during.percentile(.99)), ms(p.aft.percentile(.99)), 100*change)
		runs++
		if change <= 0.2 {
			within++
		}
		if next := i + 1; next == len(r.purges) || r.purges[next].target != p.target || r.purges[next].duty != p.duty {
			groups = append(groups, fmt.Sprintf("- %s, %s: claim p99 within +20%% in %d of %d runs.\n", p.target, mode, within, runs))
			within, runs = 0, 0
		}
	}
	fmt.Fprintf(w, "\n%s\n", strings.Join(groups, ""))
}
