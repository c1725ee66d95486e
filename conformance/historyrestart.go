package conformance

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"
)

// Database restarts in the History case, on a Backend with Restart: once
// or twice, when a seeded share of the operations has started, the server
// restarts while the workers go on. Nothing in the model changes for it:
// an operation that met the restart failed before its COMMIT (the
// connection broke or was refused: nothing of it committed, since nothing
// commits before COMMIT), failed at COMMIT with an error the dialect
// reports as a known failure (a server error, a connection broken before
// anything was sent), or has an outcome the dialect reports as unknown
// (the connection broke after COMMIT left), and the history records each
// as it records the injected faults. A worker whose operation failed while
// the server was down waits until it answers again, so the history goes on
// after the restart instead of spending its operations on refused
// connections.

const (
	// historyRestartTimeout bounds one restart, until the server answers
	// again.
	historyRestartTimeout = 45 * time.Second
	// historyServerPoll is how often a restarting server is asked whether
	// it answers.
	historyServerPoll = 100 * time.Millisecond
)

// historyRestarts is the schedule and the record of a history's restarts.
type historyRestarts struct {
	restart func(ctx context.Context) error
	// at are the operation numbers (counted as workers start them) that
	// begin each restart.
	at []int64

	wg sync.WaitGroup
	mu sync.Mutex
	// windows are the restarts so far, from when Restart was called to
	// when the server answered again (end 0 while under way).
	windows []restartWindow
	// up is closed when the restart under way ends; nil when none is.
	up  chan struct{}
	err []string
}

type restartWindow struct {
	begin, end int64
	took       time.Duration
}

// newHistoryRestarts schedules one or two restarts among n operations:
// the first when between a sixth and two fifths of them started, the
// second, if any, when between half and four fifths did.
func newHistoryRestarts(seed uint64, n int, restart func(ctx context.Context) error) *historyRestarts {
	rng := rand.New(rand.NewPCG(seed, 0x7e57a27))
	r := &historyRestarts{restart: restart}
	spans := [][2]float64{{1.0 / 6, 0.4}, {0.5, 0.8}}
	for i := range 1 + rng.IntN(2) {
		lo, hi := spans[i][0], spans[i][1]
		r.at = append(r.at, int64(float64(n)*(lo+(hi-lo)*rng.Float64())))
	}
	return r
}

// started is called as a worker starts operation number op (from 1): it
// begins the restart scheduled there, in the background.
func (h *historyRun[TTx]) started(op int64) {
	r := h.restarts
	if r == nil || !slices.Contains(r.at, op) {
		return
	}
	r.mu.Lock()
	r.windows = append(r.windows, restartWindow{begin: h.now()})
	i := len(r.windows) - 1
	r.up = make(chan struct{})
	r.mu.Unlock()
	r.wg.Go(func() { h.restartServer(i) })
}

// restartServer restarts the server and waits until it answers again.
func (h *historyRun[TTx]) restartServer(i int) {
	r := h.restarts
	began := time.Now()
	ctx, cancel := context.WithTimeout(h.Ctx, historyRestartTimeout)
	defer cancel()
	err := r.restart(ctx)
	if err == nil {
		err = h.serverAnswers(ctx)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.windows[i].end, r.windows[i].took = h.now(), time.Since(began)
	if err != nil {
		r.err = append(r.err, fmt.Sprintf("restart %d: %v", i+1, err))
	}
	close(r.up)
	r.up = nil
}

// serverAnswers waits, within ctx, until a statement on the pool succeeds.
func (h *historyRun[TTx]) serverAnswers(ctx context.Context) error {
	for {
		_, err := h.Driver.Pool().Exec(ctx, "SELECT 1")
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the server does not answer: %w (last error: %v)", ctx.Err(), err)
		case <-time.After(historyServerPoll):
		}
	}
}

// awaitServer waits until the restart under way, if any, ends.
func (h *historyRun[TTx]) awaitServer(ctx context.Context) {
	r := h.restarts
	if r == nil {
		return
	}
	r.mu.Lock()
	up := r.up
	r.mu.Unlock()
	if up == nil {
		return
	}
	select {
	case <-up:
	case <-ctx.Done():
	}
}

// settle waits for the restarts to end and for the server to answer,
// before the history's final reads.
func (h *historyRun[TTx]) settle() {
	r := h.restarts
	if r == nil {
		return
	}
	r.wg.Wait()
	ctx, cancel := context.WithTimeout(h.Ctx, historyRestartTimeout)
	defer cancel()
	if err := h.serverAnswers(ctx); err != nil {
		h.T.Fatalf("[%s] after the history's restarts: %v", h.Backend, err)
	}
	if len(r.err) > 0 {
		h.T.Fatalf("[%s] restarting the server: %s", h.Backend, strings.Join(r.err, "; "))
	}
}

// restartReport describes each restart and the operations that met it
// (called while it ran, or returned while it ran), by result; it runs
// before the unknown operations are made to return at the history's end.
func (h *historyRun[TTx]) restartReport() []string {
	r := h.restarts
	if r == nil {
		return nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	var lines []string
	for i, w := range r.windows {
		counts := map[string]int{}
		met := 0
		for _, op := range h.ops {
			in, out := op.Input.(histInput), op.Output.(histOutput)
			if op.Call <= w.end && op.Return >= w.begin {
				met++
				counts[in.Kind.String()+" "+out.Result.String()]++
			}
		}
		names := make([]string, 0, len(counts))
		for k := range counts {
			names = append(names, k)
		}
		slices.Sort(names)
		parts := make([]string, len(names))
		for j, k := range names {
			parts[j] = fmt.Sprintf("%s %d", k, counts[k])
		}
		lines = append(lines, fmt.Sprintf("restart %d of %d at operation %d: %v until the server answered; %d operations met it (%s)",
			i+1, len(r.at), r.at[i], w.took.Round(time.Millisecond), met, strings.Join(parts, ", ")))
	}
	if len(r.windows) < len(r.at) {
		lines = append(lines, fmt.Sprintf("only %d of %d restarts began (the history had fewer operations)", len(r.windows), len(r.at)))
	}
	return lines
}
