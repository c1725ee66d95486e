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

// report collects the cells of a run and prints them as Markdown.
type report struct {
	opts    options
	started time.Time
	servers []string
	cells   []*cell
	sizes   []targetSizes
	purges  []*purgeResult
}

type targetSizes struct {
	target    string
	keysTable string
	sizes     []relSize
}

func (r *report) add(c *cell) { r.cells = append(r.cells, c) }

// summary is the median over rounds of one target, level and path.
type summary struct {
	target   string
	clients  int
	path     path
	rounds   int
	tput     float64
	p50, p99 time.Duration
	rt, st   float64
	// client and server CPU per request, in microseconds
	cpuC, cpuS float64
	ops        int64
	errors     int64
	firstErr   error
	outcomes   [5]int64
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

func (r *report) summaries() []*summary {
	var out []*summary
	find := func(c *cell) *summary {
		for _, s := range out {
			if s.target == c.target && s.clients == c.clients && s.path == c.path {
				return s
			}
		}
		s := &summary{target: c.target, clients: c.clients, path: c.path}
		out = append(out, s)
		return s
	}
	type acc struct {
		tput     []float64
		p50, p99 []time.Duration
		wire     counts
		cpuC     time.Duration
		cpuS     time.Duration
	}
	accs := map[*summary]*acc{}
	for _, c := range r.cells {
		s := find(c)
		a := accs[s]
		if a == nil {
			a = &acc{}
			accs[s] = a
		}
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
		s.rt, s.st = perOp(a.wire.roundTrips, s.ops), perOp(a.wire.statements, s.ops)
		s.cpuC, s.cpuS = usPerOp(a.cpuC, s.ops), usPerOp(a.cpuS, s.ops)
		if a.wire.opaque {
			s.st = -1
		}
	}
	return out
}

func (r *report) bareOf(all []*summary, s *summary) *summary {
	for _, b := range all {
		if b.target == s.target && b.clients == s.clients && b.path == pathBare {
			return b
		}
	}
	return nil
}

func (r *report) onWire(target string) bool {
	return !strings.HasPrefix(target, "sqlite")
}

func (r *report) write(w io.Writer) {
	o := r.opts
	fmt.Fprintf(w, "## idem-bench results\n\n")
	fmt.Fprintf(w, "Run %s, %s, Go %s %s/%s, %d CPUs. Cells of %v (at most %d requests), %d interleaved rounds per level, median shown; warm-up %v per level.\n\n",
		r.started.Format(time.RFC3339), time.Since(r.started).Round(time.Second), runtime.Version(), runtime.GOOS, runtime.GOARCH, runtime.NumCPU(),
		o.duration, o.maxOps, o.rounds, o.warmup)
	for _, s := range r.servers {
		fmt.Fprintf(w, "- %s\n", s)
	}
	fmt.Fprintln(w)
	all := r.summaries()

	fmt.Fprintf(w, "### Throughput and latency\n\n")
	fmt.Fprintf(w, "RT/req: round trips per request counted on the client's sockets (SQLite runs in-process: none). ")
	fmt.Fprintf(w, "Stmts/req: statements the server executed per request, BEGIN and COMMIT included. ")
	fmt.Fprintf(w, "CPU µs/req: CPU time of the benchmark process (the client; for SQLite also the database) and of the database container, per request. ")
	fmt.Fprintf(w, "vs bare: throughput divided by the bare write's at the same level.\n\n")
	fmt.Fprintf(w, "| backend | clients | path | req/s | p50 ms | p99 ms | RT/req | stmts/req | CPU µs/req client+db | vs bare | outcomes |\n")
	fmt.Fprintf(w, "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---|\n")
	for _, s := range all {
		ratio := "—"
		if b := r.bareOf(all, s); b != nil && s.path != pathBare && b.tput > 0 {
			ratio = fmt.Sprintf("%.2f", s.tput/b.tput)
		}
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
		fmt.Fprintf(w, "| %s | %d | %s | %.0f | %.2f | %.2f | %s | %s | %s | %s | %s |\n",
			s.target, s.clients, s.path, s.tput, ms(s.p50), ms(s.p99), rt, st, cpu, ratio, outcomes(s))
	}
	fmt.Fprintln(w)

	r.writeTargets(w, all)
	r.writeSizes(w)
	r.writePurges(w)
}

func outcomes(s *summary) string {
	var parts []string
	for _, o := range []idem.Outcome{idem.Won, idem.Replay, idem.Mismatch, idem.InFlight} {
		if n := s.outcomes[o]; n > 0 && (s.path == pathContended || o != expected(s.path)) {
			parts = append(parts, fmt.Sprintf("%s %d", o, n))
		}
	}
	if s.errors > 0 {
		parts = append(parts, fmt.Sprintf("**%d errors** (%v)", s.errors, s.firstErr))
	}
	return strings.Join(parts, ", ")
}

func expected(p path) idem.Outcome {
	switch p {
	case pathReplay, pathReplayRF:
		return idem.Replay
	case pathMismatch:
		return idem.Mismatch
	}
	return idem.Won
}

// writeTargets compares the ratios with the targets.
func (r *report) writeTargets(w io.Writer, all []*summary) {
	fmt.Fprintf(w, "### Against the targets (16 clients)\n\n")
	fmt.Fprintf(w, "| backend | idem / bare (≥ 0.85) | http / bare | replay / bare (≥ 2) | with ReadFirst: idem / bare, replay / bare | purge: claim p99 change (≤ +20%%) |\n")
	fmt.Fprintf(w, "|---|---:|---:|---:|---:|---:|\n")
	var targets []string
	for _, s := range all {
		if !slices.Contains(targets, s.target) {
			targets = append(targets, s.target)
		}
	}
	ratio := func(t string, p path) string {
		var b, x *summary
		for _, s := range all {
			if s.target == t && s.clients == 16 {
				switch s.path {
				case pathBare:
					b = s
				case p:
					x = s
				}
			}
		}
		if b == nil || x == nil || b.tput == 0 {
			return "—"
		}
		return fmt.Sprintf("%.2f", x.tput/b.tput)
	}
	for _, t := range targets {
		var purges []string
		for _, p := range r.purges {
			if p.target == t && p.before != nil && p.during != nil && p.before.percentile(.99) > 0 {
				change := fmt.Sprintf("%+.0f%%", 100*(float64(p.during.percentile(.99))/float64(p.before.percentile(.99))-1))
				if p.duty < 1 {
					change += fmt.Sprintf(" (paced %.0f%%)", 100*p.duty)
				}
				purges = append(purges, change)
			}
		}
		purge := "—"
		if len(purges) > 0 {
			purge = strings.Join(purges, ", ")
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s, %s | %s |\n", t, ratio(t, pathIdem), ratio(t, pathHTTP), ratio(t, pathReplay),
			ratio(t, pathIdemRF), ratio(t, pathReplayRF), purge)
	}
	fmt.Fprintln(w)
}

func (r *report) writeSizes(w io.Writer) {
	if len(r.sizes) == 0 {
		return
	}
	fmt.Fprintf(w, "### Storage\n\n")
	fmt.Fprintf(w, "Sizes after the run, as the database reports them (PostgreSQL pg_table_size and pg_indexes_size; InnoDB data_length and index_length after ANALYZE TABLE; SQLite dbstat), scaled to a million rows. The order table is the user's write, for comparison.\n\n")
	fmt.Fprintf(w, "| backend | table | rows | table MB / 1M rows | indexes MB / 1M rows | bytes / row | note |\n")
	fmt.Fprintf(w, "|---|---|---:|---:|---:|---:|---|\n")
	for _, ts := range r.sizes {
		for _, s := range ts.sizes {
			if s.rows == 0 {
				continue
			}
			per := func(b int64) float64 { return float64(b) / float64(s.rows) * 1e6 / (1 << 20) }
			kind := "orders"
			if s.table == ts.keysTable {
				kind = "idem records"
			}
			fmt.Fprintf(w, "| %s | %s | %d | %.1f | %.1f | %.0f | %s |\n", ts.target, kind, s.rows, per(s.tableBytes), per(s.indexBytes),
				float64(s.tableBytes+s.indexBytes)/float64(s.rows), s.note)
		}
	}
	fmt.Fprintln(w)
}

func (r *report) writePurges(w io.Writer) {
	if len(r.purges) == 0 {
		return
	}
	fmt.Fprintf(w, "### Purge of expired records while claims run\n\n")
	fmt.Fprintf(w, "Expired records inserted in bulk (then the database settles: PostgreSQL VACUUM and CHECKPOINT, InnoDB 10 s, SQLite a WAL checkpoint), then purged in batches of %d while %d clients claim new keys through Do. ", idem.DefaultPurgeBatch, r.opts.purgeConc)
	fmt.Fprintf(w, "Store.Purge ran with PurgeDutyCycle 1 (batches back to back, the rows marked Store.Purge) and/or with the given duty cycle (the default is 0.25: a pause after each batch, so that it purges only that fraction of the time). ")
	fmt.Fprintf(w, "Claims are measured for %v before, during the whole purge, and %v after.\n\n", r.opts.purgeWindow, r.opts.purgeWindow)
	fmt.Fprintf(w, "| backend | purge | expired rows | purge time | rows/s | claims/s before / during / after | claim p99 ms before / during / after | p99 change |\n")
	fmt.Fprintf(w, "|---|---|---:|---:|---:|---|---|---:|\n")
	for _, p := range r.purges {
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
		fmt.Fprintf(w, "| %s | %s | %d | %s | %.0f | %.0f / %.0f / %.0f | %.2f / %.2f / %.2f | %+.0f%% |\n",
			p.target, mode, p.purge.Deleted, took, rate,
			p.before.throughput(), p.during.throughput(), p.aft.throughput(),
			ms(p.before.percentile(.99)), ms(p.during.percentile(.99)), ms(p.aft.percentile(.99)), 100*change)
	}
	fmt.Fprintln(w)
}
