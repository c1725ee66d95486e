package idemhttp

import "testing"

// TestPatternHasHost: the fingerprint leaves the host out only when the
// route's pattern already fixes it (a ServeMux pattern whose path part does
// not start with "/" begins with a host).
func TestPatternHasHost(t *testing.T) {
	for _, tc := range []struct {
		pattern string
		want    bool
	}{
		{"", false},
		{"/", false},
		{"/orders/{id}", false},
		{"POST /orders/{id}", false},
		{"POST\t/orders", false},
		{"example.com/", true},
		{"example.com/orders/{id}", true},
		{"POST example.com/orders", true},
		{"POST  api.example.com/", true},
	} {
		if got := patternHasHost(tc.pattern); got != tc.want {
			t.Errorf("patternHasHost(%q) = %v, want %v", tc.pattern, got, tc.want)
		}
	}
}
