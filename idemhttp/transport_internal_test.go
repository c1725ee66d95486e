package idemhttp

import (
	"testing"
	"time"
)

// TestDelay: without Retry-After, the wait before attempt n+1 is the base
// delay doubled n-1 times and capped at MaxDelay, jittered to between half
// and all of it. A base that does not divide the cap (30 ms, 80 ms) shows
// the cap: 30, 60, then 80, never 120.
func TestDelay(t *testing.T) {
	tr := &Transport{BaseDelay: 30 * time.Millisecond, MaxDelay: 80 * time.Millisecond}
	now := time.Now()
	for n, step := range []time.Duration{30, 60, 80, 80, 80, 80, 80, 80} {
		step *= time.Millisecond
		var lowest, highest time.Duration = step, 0
		for range 200 {
			d := tr.delay(n+1, nil, now)
			if d < step/2 || d > step {
				t.Fatalf("delay(%d) = %v, want between %v and %v", n+1, d, step/2, step)
			}
			lowest, highest = min(lowest, d), max(highest, d)
		}
		if highest-lowest < step/4 {
			t.Errorf("delay(%d) stayed within %v..%v over 200 samples: no jitter", n+1, lowest, highest)
		}
	}
}
