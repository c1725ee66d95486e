package idem

import (
	"testing"
	"time"
)

// TestBackoff: pause, the wait before attempt n is jittered in (0, 2 ms << (n-2)],
// capped at 100 ms, and uses the whole of that range (its samples reach both
// halves of it: full jitter, so racing retries spread out).
func TestBackoff(t *testing.T) {
	const samples = 400
	for n := 2; n <= 20; n++ {
		ceiling := min(2*time.Millisecond<<min(n-2, 6), 100*time.Millisecond)
		var largest, smallest time.Duration = 0, ceiling
		for range samples {
			d := pause(n)
			if d <= 0 || d > ceiling {
				t.Fatalf("pause(%d) = %v, want in (0, %v]", n, d, ceiling)
			}
			largest, smallest = max(largest, d), min(smallest, d)
		}
		if largest <= ceiling/2 || smallest > ceiling/2 {
			t.Errorf("pause(%d): %d samples between %v and %v, want some on each side of %v (full jitter up to %v)", n, samples, smallest, largest, ceiling/2, ceiling)
		}
	}
}
