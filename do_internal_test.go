package idem

import (
	"testing"
	"time"
)

// TestBackoff: the pause before attempt n is jittered in (0, 2 ms << (n-2)],
// capped at 100 ms, and uses the whole of that range (its largest samples
// reach the upper half of it).
func TestBackoff(t *testing.T) {
	const samples = 400
	for n := 2; n <= 20; n++ {
		ceiling := min(2*time.Millisecond<<min(n-2, 6), 100*time.Millisecond)
		var largest time.Duration
		for range samples {
			d := backoff(n)
			if d <= 0 || d > ceiling {
				t.Fatalf("backoff(%d) = %v, want in (0, %v]", n, d, ceiling)
			}
			largest = max(largest, d)
		}
		if largest <= ceiling/2 {
			t.Errorf("backoff(%d): the largest of %d samples is %v, want above %v (full jitter up to %v)", n, samples, largest, ceiling/2, ceiling)
		}
	}
}
