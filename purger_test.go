package idem_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem"
)

// countingPurger answers each Purge from a script and counts the calls.
type countingPurger struct {
	mu    sync.Mutex
	calls []time.Time
	fail  func(n int) error
}

func (p *countingPurger) Purge(ctx context.Context) (idem.PurgeResult, error) {
	p.mu.Lock()
	p.calls = append(p.calls, time.Now())
	n := len(p.calls)
	p.mu.Unlock()
	if p.fail != nil {
		if err := p.fail(n); err != nil {
			return idem.PurgeResult{Deleted: 1, Batches: 1}, err
		}
	}
	return idem.PurgeResult{Deleted: int64(n), Batches: 1}, nil
}

func TestRunPurgesSchedule(t *testing.T) {
	const interval = 20 * time.Millisecond
	boom := errors.New("disk full")
	p := &countingPurger{fail: func(n int) error {
		if n == 2 {
			return boom
		}
		return nil
	}}
	var (
		mu   sync.Mutex
		runs []idem.PurgeRun
	)
	ctx, cancel := context.WithCancel(context.Background())
	var logs bytes.Buffer
	done := make(chan error, 1)
	go func() {
		done <- idem.RunPurges(ctx, p, idem.PurgeSchedule{
			Interval: interval,
			Jitter:   0.5,
			Logger:   slog.New(slog.NewTextHandler(&logs, nil)), // info: only the failure shows
			Report: func(r idem.PurgeRun) {
				mu.Lock()
				defer mu.Unlock()
				runs = append(runs, r)
				if len(runs) == 5 {
					cancel()
				}
			},
		})
	}()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("RunPurges returned %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		cancel()
		t.Fatal("RunPurges did not stop within 10s of 5 runs")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(runs) != 5 {
		t.Fatalf("%d runs reported, want 5 (the schedule goes on after a failure, and stops with its context)", len(runs))
	}
	for i, r := range runs {
		wantErr := i == 1
		if (r.Err != nil) != wantErr || (wantErr && !errors.Is(r.Err, boom)) {
			t.Errorf("run %d: error %v, want an error: %v", i+1, r.Err, wantErr)
		}
		if r.Started.IsZero() || r.Took < 0 || r.Result.Batches != 1 {
			t.Errorf("run %d: %+v", i+1, r)
		}
	}
	// Pauses between runs: Interval +- 50 %, never back to back.
	for i := 1; i < len(p.calls); i++ {
		if gap := p.calls[i].Sub(p.calls[i-1]); gap < interval/2 {
			t.Errorf("pause %d was %v, want at least %v", i, gap, interval/2)
		}
	}
	if out := logs.String(); strings.Count(out, "level=WARN") != 1 || !strings.Contains(out, "disk full") {
		t.Errorf("log %q, want one warning for the failed run", out)
	}
}

func TestRunPurgesStopsDuringPause(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	started := time.Now()
	err := idem.RunPurges(ctx, &countingPurger{}, idem.PurgeSchedule{Interval: time.Hour, Jitter: -1})
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(started) > 5*time.Second {
		t.Fatalf("RunPurges with an hourly interval: %v after %v, want DeadlineExceeded soon after 50ms", err, time.Since(started))
	}
}

func TestRunPurgesRefusesBadSchedule(t *testing.T) {
	for _, s := range []idem.PurgeSchedule{{Interval: -time.Second}, {Jitter: 1}} {
		if err := idem.RunPurges(context.Background(), &countingPurger{}, s); !errors.Is(err, idem.ErrInvalidConfig) {
			t.Errorf("RunPurges(%+v) = %v, want ErrInvalidConfig", s, err)
		}
	}
	if err := idem.RunPurges(context.Background(), nil, idem.PurgeSchedule{}); !errors.Is(err, idem.ErrInvalidConfig) {
		t.Errorf("RunPurges(nil) = %v, want ErrInvalidConfig", err)
	}
}
