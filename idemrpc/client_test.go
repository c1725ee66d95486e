package idemrpc_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemrpc"
)

// TestClientKey: the caller's key is kept, none makes one, and a key the
// server would refuse is not sent.
func TestClientKey(t *testing.T) {
	made := func() string { return "made-1" }
	for _, tc := range []struct {
		name     string
		sent     []string
		newKey   func() string
		want     string
		wantMade bool
		invalid  bool
	}{
		{"none: made", nil, made, "made-1", true, false},
		{"none: NewKey by default", nil, nil, "", true, false},
		{"the caller's", []string{"mine"}, made, "mine", false, false},
		{"two", []string{"a", "b"}, made, "", false, true},
		{"empty", []string{""}, made, "", false, true},
		{"too long", []string{strings.Repeat("k", 256)}, made, "", false, true},
		{"not ASCII", []string{"clé"}, made, "", false, true},
		{"a bad key made", nil, func() string { return "" }, "", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key, wasMade, err := idemrpc.ClientKey(tc.sent, tc.newKey)
			if tc.invalid {
				if !errors.Is(err, idem.ErrInvalidKey) || key != "" {
					t.Errorf("%q, %v; want an error matching idem.ErrInvalidKey", key, err)
				}
				return
			}
			if err != nil || wasMade != tc.wantMade || (tc.want != "" && key != tc.want) || idem.ValidateKey(key) != nil {
				t.Errorf("%q (made %v), %v; want %q (made %v)", key, wasMade, err, tc.want, tc.wantMade)
			}
		})
	}
}

// TestNewKey: a valid key, a version 4 UUID, another each time.
func TestNewKey(t *testing.T) {
	seen := map[string]bool{}
	for range 100 {
		k := idemrpc.NewKey()
		if idem.ValidateKey(k) != nil || len(k) != 36 || k[14] != '4' || seen[k] {
			t.Fatalf("NewKey() = %q", k)
		}
		seen[k] = true
	}
}

// TestRetryable: what a retry can change, and never a replayed answer.
func TestRetryable(t *testing.T) {
	for c := idemrpc.OK; c <= idemrpc.Unauthenticated; c++ {
		want := c == idemrpc.Unavailable || c == idemrpc.Aborted || c == idemrpc.DeadlineExceeded
		if got := idemrpc.Retryable(c, false); got != want {
			t.Errorf("Retryable(%v) = %v, want %v", c, got, want)
		}
		if idemrpc.Retryable(c, true) {
			t.Errorf("Retryable(%v, replayed) = true", c)
		}
	}
}

// TestRetryPolicy: defaults, the server's delay capped and never negative,
// and a backoff between half and all of the doubled step.
func TestRetryPolicy(t *testing.T) {
	if got := (idemrpc.Retry{}).Attempts(); got != idemrpc.DefaultMaxAttempts {
		t.Errorf("default attempts %d", got)
	}
	if got := (idemrpc.Retry{MaxAttempts: 3}).Attempts(); got != 3 {
		t.Errorf("attempts %d, want 3", got)
	}
	r := idemrpc.Retry{BaseDelay: 10 * time.Millisecond, MaxDelay: time.Second}
	for _, tc := range []struct {
		server time.Duration
		want   time.Duration
	}{
		{300 * time.Millisecond, 300 * time.Millisecond},
		{time.Hour, time.Second},
		{-time.Second, 0},
	} {
		if got := r.Delay(1, tc.server, true); got != tc.want {
			t.Errorf("Delay with the server's %v = %v, want %v", tc.server, got, tc.want)
		}
	}
	if got := (idemrpc.Retry{}).Delay(1, time.Hour, true); got != idemrpc.DefaultMaxDelay {
		t.Errorf("default cap: %v, want %v", got, idemrpc.DefaultMaxDelay)
	}
	for n, step := range map[int]time.Duration{1: 10 * time.Millisecond, 2: 20 * time.Millisecond, 3: 40 * time.Millisecond, 20: time.Second} {
		for range 20 {
			if got := r.Delay(n, 0, false); got < step/2 || got > step {
				t.Errorf("Delay(%d) = %v, want between %v and %v", n, got, step/2, step)
			}
		}
	}
}
