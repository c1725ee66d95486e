package main

import (
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
)

func TestCompletedOnce(t *testing.T) {
	for _, tc := range []struct {
		name   string
		counts []int32
		want   string // in the error; "" for none
	}{
		{"each once", []int32{1, 1, 1}, ""},
		{"a double completion", []int32{1, 2, 1}, "key 1 2 times"},
		{"a key never completed", []int32{0, 1}, "key 0 0 times"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			done := make([]atomic.Int32, len(tc.counts))
			for i, n := range tc.counts {
				done[i].Store(n)
			}
			err := completedOnce(done)
			if (err == nil) != (tc.want == "") || err != nil && !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("completedOnce(%v) = %v, want an error with %q", tc.counts, err, tc.want)
			}
		})
	}
}

// TestTakeoverStormOnSQLite: every key whose holder died is taken over once
// and completed once; the other clients replay it (or, past WaitBound,
// find it in flight).
func TestTakeoverStormOnSQLite(t *testing.T) {
	tg := newTestSQLite(t)
	const keys, racers = 12, 3
	fn, done, err := tg.storm(t.Context(), newKeySpace("storm-test", "storm", keys, 0), keys)
	if err != nil {
		t.Fatal(err)
	}
	before := countOrders(t, tg)
	c := measure(t.Context(), tg, keys*racers, time.Minute, keys*racers, fn, nil)
	if c.errors > 0 || c.outcomes[idem.Won] != keys || c.outcomes[idem.Won]+c.outcomes[idem.Replay]+c.outcomes[idem.InFlight] != keys*racers {
		t.Fatalf("storm: outcomes %v, %d errors (first %v), want %d won of %d", c.outcomes, c.errors, c.firstErr, keys, keys*racers)
	}
	if err := completedOnce(done); err != nil {
		t.Fatal(err)
	}
	if n := countOrders(t, tg) - before; n != keys {
		t.Fatalf("%d orders, want %d", n, keys)
	}
}
