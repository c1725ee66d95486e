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
// Restarts never overlap: one that falls due while another runs begins
// when that one ends.
type historyRestarts struct {
	ctx     context.Context
	restart func(ctx context.Context) error
	// answers waits, within its context, until the server answers again.
	answers func(ctx context.Context) error
	// now is the history's clock.
	now func() int64
	// at are the operation numbers (counted as workers start them) that
	// begin each restart.
	at []int64

	wg sync.WaitGroup
	mu sync.Mutex
	// windows are the restarts so far, from when Restart was called to
	// when the server answered again (end 0 while under way).
	windows []restartWindow
	// due counts the restarts that fell due while another ran.
	due int
	// up is closed when the restart under way ends; nil when none is.
	// Each restart has a channel of its own.
	up  chan struct{}
	err []string
}

type restartWindow struct {
	begin, end int64
	took       time.Duration
	// postponed says the restart fell due while another ran.
	postponed bool
}

// newHistoryRestarts schedules one or two restarts among n operations:
// the first when between a sixth and two fifths of them started, the
// second, if any, when between half and four fifths did. Each restart
// calls restart, then answers, within ctx and historyRestartTimeout.
func newHistoryRestarts(ctx context.Context, seed uint64, n int, restart, answers func(ctx context.Context) error, now func() int64) *historyRestarts {
	rng := rand.New(rand.NewPCG(seed, 0x7e57a27))
	r := &historyRestarts{ctx: ctx, restart: restart, answers: answers, now: now}
	spans := [][2]float64{{1.0 / 6, 0.4}, {0.5, 0.8}}
	for i := range 1 + rng.IntN(2) {
		lo, hi := spans[i][0], spans[i][1]
		// Operations count from 1; each restart has an operation of its
		// own, even in a short history.
		at := max(int64(float64(n)*(lo+(hi-lo)*rng.Float64())), 1)
		if len(r.at) > 0 {
			at = max(at, r.at[len(r.at)-1]+1)
		}
		if at > int64(n) {
			break
		}
		r.at = append(r.at, at)
	}
	return r
}

// started is called as a worker starts operation number op (from 1).
func (h *historyRun[TTx]) started(op int64) {
	if h.restarts != nil {
		h.restarts.started(op)
	}
}

// started begins the restart scheduled at operation op, in the
// background, or, while another runs, has it begin when that one ends.
func (r *historyRestarts) started(op int64) {
	if !slices.Contains(r.at, op) {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.up != nil {
		r.due++
		return
	}
	i := r.beginLocked(false)
	r.wg.Go(func() { r.run(i) })
}

// beginLocked opens the window of a restart beginning now, and its
// channel.
func (r *historyRestarts) beginLocked(postponed bool) int {
	r.windows = append(r.windows, restartWindow{begin: r.now(), postponed: postponed})
	r.up = make(chan struct{})
	return len(r.windows) - 1
}

// run runs restart i, then those that fell due meanwhile, one at a time.
func (r *historyRestarts) run(i int) {
	for {
		err := r.restartServer()
		r.mu.Lock()
		r.windows[i].end = r.now()
		r.windows[i].took = time.Duration(r.windows[i].end - r.windows[i].begin)
		if err != nil {
			r.err = append(r.err, fmt.Sprintf("restart %d: %v", i+1, err))
		}
		close(r.up)
		r.up = nil
		if r.due == 0 {
			r.mu.Unlock()
			return
		}
		r.due--
		i = r.beginLocked(true)
		r.mu.Unlock()
	}
}

// restartServer restarts the server and waits until it answers again.
func (r *historyRestarts) restartServer() error {
	ctx, cancel := context.WithTimeout(r.ctx, historyRestartTimeout)
	defer cancel()
	if err := r.restart(ctx); err != nil {
		return err
	}
	return r.answers(ctx)
}

// awaitServer waits until the restart under way, if any, ends.
func (h *historyRun[TTx]) awaitServer(ctx context.Context) {
	if h.restarts != nil {
		h.restarts.await(ctx)
	}
}

// await waits, within ctx, until the restart under way, if any, ends.
func (r *historyRestarts) await(ctx context.Context) {
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
		late := ""
		if w.postponed {
			late = " (postponed until the one before ended)"
		}
		lines = append(lines, fmt.Sprintf("restart %d of %d at operation %d%s: %v until the server answered; %d operations met it (%s)",
			i+1, len(r.at), r.at[i], late, w.took.Round(time.Millisecond), met, strings.Join(parts, ", ")))
	}
	if len(r.windows) < len(r.at) {
		lines = append(lines, fmt.Sprintf("only %d of %d restarts began (the history had fewer operations)", len(r.windows), len(r.at)))
	}
	return lines
}
