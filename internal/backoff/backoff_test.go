package backoff

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"
)

// TestStep: the base doubles with every attempt and stops at the limit,
// also when the base does not divide it (30, 60, then 80, never 120), when
// the base is above it, and for attempts far past the cap (no overflow).
func TestStep(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		n           int
		base, limit time.Duration
		want        time.Duration
	}{
		{1, 30 * ms, 80 * ms, 30 * ms},
		{2, 30 * ms, 80 * ms, 60 * ms},
		{3, 30 * ms, 80 * ms, 80 * ms},
		{9, 30 * ms, 80 * ms, 80 * ms},
		{1, 2 * ms, 100 * ms, 2 * ms},
		{6, 2 * ms, 100 * ms, 64 * ms},
		{7, 2 * ms, 100 * ms, 100 * ms},
		{0, 5 * ms, 100 * ms, 5 * ms},
		{1, 200 * ms, 100 * ms, 100 * ms},
		{math.MaxInt, 100 * ms, 10 * time.Second, 10 * time.Second},
		{math.MaxInt, 1, time.Duration(math.MaxInt64), time.Duration(math.MaxInt64)},
	} {
		if got := Step(tc.n, tc.base, tc.limit); got != tc.want {
			t.Errorf("Step(%d, %v, %v) = %v, want %v", tc.n, tc.base, tc.limit, got, tc.want)
		}
	}
}

// TestJitter: Full stays in (0, d] and Half in [d/2, d], and each reaches
// both ends of its range over many draws (so the jitter is really there).
// Half works in whole halves: its largest value is 2*(d/2).
func TestJitter(t *testing.T) {
	for _, tc := range []struct {
		name   string
		jitter func(time.Duration) time.Duration
		low    func(d time.Duration) time.Duration // the smallest value it may draw
		high   func(d time.Duration) time.Duration // the largest
	}{
		{"Full", Full, func(time.Duration) time.Duration { return 1 }, func(d time.Duration) time.Duration { return d }},
		{"Half", Half, func(d time.Duration) time.Duration { return d / 2 }, func(d time.Duration) time.Duration { return d / 2 * 2 }},
	} {
		for _, d := range []time.Duration{1, 2, 7, 100 * time.Millisecond, 10 * time.Second} {
			low, high := tc.low(d), tc.high(d)
			var lowest, highest time.Duration = d, 0
			for range 2000 {
				got := tc.jitter(d)
				if got < low || got > high {
					t.Fatalf("%s(%v) = %v, want in [%v, %v]", tc.name, d, got, low, high)
				}
				lowest, highest = min(lowest, got), max(highest, got)
			}
			// Both quarters at the ends of the range are hit.
			if quarter := (high - low) / 4; lowest > low+quarter || highest < high-quarter {
				t.Errorf("%s(%v): 2000 draws within %v..%v, want both ends of [%v, %v]", tc.name, d, lowest, highest, low, high)
			}
		}
	}
	if got := Half(0); got != 0 {
		t.Errorf("Half(0) = %v, want 0", got)
	}
}

// TestSleep: Sleep waits its duration on a live context, returns at once
// with the context's error when the context ends first (cancelled before
// or during the wait, or by its deadline), and does not wait for d <= 0.
func TestSleep(t *testing.T) {
	live := context.Background()
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		name    string
		ctx     func(t *testing.T) context.Context
		d       time.Duration
		want    error
		atLeast time.Duration
	}{
		{"waits", func(*testing.T) context.Context { return live }, 20 * time.Millisecond, nil, 20 * time.Millisecond},
		{"zero", func(*testing.T) context.Context { return live }, 0, nil, 0},
		{"negative", func(*testing.T) context.Context { return live }, -time.Second, nil, 0},
		{"cancelled before", func(*testing.T) context.Context { return cancelled }, time.Hour, context.Canceled, 0},
		{"cancelled before, zero", func(*testing.T) context.Context { return cancelled }, 0, context.Canceled, 0},
		{"cancelled during", func(t *testing.T) context.Context {
			ctx, cancel := context.WithCancel(context.Background())
			time.AfterFunc(20*time.Millisecond, cancel)
			t.Cleanup(cancel)
			return ctx
		}, time.Hour, context.Canceled, 20 * time.Millisecond},
		{"deadline", func(t *testing.T) context.Context {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
			t.Cleanup(cancel)
			return ctx
		}, time.Hour, context.DeadlineExceeded, 20 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The clock starts before the context's timer does: a deadline
			// counts from the context's making.
			start := time.Now()
			ctx := tc.ctx(t)
			err := Sleep(ctx, tc.d)
			took := time.Since(start)
			if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
				t.Fatalf("Sleep(%v) = %v, want %v", tc.d, err, tc.want)
			}
			if took < tc.atLeast {
				t.Errorf("Sleep(%v) returned after %v, want at least %v", tc.d, took, tc.atLeast)
			}
			if took > tc.atLeast+5*time.Second {
				t.Errorf("Sleep(%v) returned after %v: the context did not stop it", tc.d, took)
			}
		})
	}
}
