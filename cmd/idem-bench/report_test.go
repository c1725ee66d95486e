package main

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"
)

// syntheticReport is a run's report with made-up cells: three backends,
// four levels, three rounds of each path, one cell with failed requests.
func syntheticReport() *report {
	r := &report{opts: options{clients: []int{1, 4, 16, 64}, rounds: 3, duration: time.Second}, started: time.Now()}
	rate := map[path]float64{pathBare: 1000, pathFloor: 800, pathSeed: 700, pathIdem: 720, pathReplay: 1600, pathReplayRF: 4200}
	for ti, t := range []string{"sqlite", "postgres/pgx", "mariadb"} {
		for _, c := range r.opts.clients {
			for p, v := range rate {
				for round := range 3 {
					tput := v * float64(c) / (1 + float64(c)/8) * (1 + 0.1*float64(ti)) * (1 + 0.02*float64(round))
					cl := &cell{target: t, path: p, clients: c, round: round, elapsed: time.Second, ops: int64(tput),
						lat: []time.Duration{time.Millisecond, 2 * time.Millisecond}}
					cl.outcomes[expected(p)] = cl.ops
					cl.wire.roundTrips, cl.wire.statements = 3*cl.ops, 4*cl.ops
					if t == "mariadb" && c == 64 && p == pathSeed && round == 1 {
						cl.errors, cl.firstErr = 3, errors.New("deadlock")
					}
					r.add(cl)
				}
			}
		}
	}
	return r
}

func TestReportRatiosAndExclusions(t *testing.T) {
	r := syntheticReport()
	var b bytes.Buffer
	r.write(&b)
	out := b.String()
	for _, want := range []string{
		"| postgres/pgx | 16 | 0.72 | 1.03 ✓ |", // idem / bare, idem / seed
		"| mariadb | 64 | 0.72 | — |",           // the seed cell had errors: no ratio
		"### Excluded cells",
		"| mariadb | 64 | seed | 3 |",
		"replay-rf / bare (≥ 4 at 16)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q", want)
		}
	}
	if got := len(r.excluded()); got != 1 {
		t.Errorf("excluded summaries = %d, want 1", got)
	}
	// The spread of the rounds is reported: 4 % here (2 % a round).
	if !strings.Contains(out, "| sqlite | 1 | bare | 906 | 4% |") {
		t.Errorf("report lacks the spread of the rounds:\n%s", out)
	}
}
