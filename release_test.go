package idem_test

import (
	"bytes"
	"database/sql"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem"
)

// TestReleaseIsNoExpiredTakeover: the claim (a retry's Lease, or a recovery
// routine's Resume) that takes over a released lease logs no "expired lease
// taken over" warning; one that takes over a lease that lapsed does. The
// clock moves between the claim and the release, so a release that set the
// lease's end to its own time would be taken for a lapse.
func TestReleaseIsNoExpiredTakeover(t *testing.T) {
	const warning = "expired lease taken over"
	for _, tc := range []struct {
		name    string
		end     func(*testing.T, *idem.Lease[*sql.Tx], *time.Time)
		warns   bool
		logText string
	}{
		{"released", func(t *testing.T, l *idem.Lease[*sql.Tx], now *time.Time) {
			*now = now.Add(10 * time.Second) // within the one-minute lease
			if err := l.Release(t.Context()); err != nil {
				t.Fatal(err)
			}
		}, false, "released lease taken over"},
		{"lapsed", func(_ *testing.T, _ *idem.Lease[*sql.Tx], now *time.Time) {
			*now = now.Add(2 * time.Minute) // past the one-minute lease
		}, true, warning},
	} {
		for _, resume := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/resume=%v", tc.name, resume), func(t *testing.T) {
				var logs bytes.Buffer
				now := time.Date(2031, 3, 14, 12, 0, 0, 0, time.UTC)
				db, store := openOrders(idem.Config{
					Clock:  func() time.Time { return now },
					Lease:  time.Minute,
					Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
				})
				defer db.Close()
				req := idem.Request{Scope: idem.Scope("tenant-42", "job"), Key: "k", Fingerprint: idem.FingerprintRequest("POST", "/job", nil)}
				first, err := store.Lease(t.Context(), req)
				if err != nil || first.Outcome != idem.Won {
					t.Fatalf("first lease: %v, %v", first, err)
				}
				tc.end(t, first, &now)
				var second *idem.Lease[*sql.Tx]
				if resume {
					second, err = store.Resume(t.Context(), req.Scope, req.Key)
				} else {
					second, err = store.Lease(t.Context(), req)
				}
				if err != nil || second.Outcome != idem.Won || !second.Resumed() {
					t.Fatalf("second lease: %v resumed %v, %v; want a won takeover", second, second != nil && second.Resumed(), err)
				}
				text := logs.String()
				if got := strings.Contains(text, "level=WARN msg=\"idem: "+warning); got != tc.warns {
					t.Errorf("takeover of a %s lease: WARN %q logged %v, want %v:\n%s", tc.name, warning, got, tc.warns, text)
				}
				if !strings.Contains(text, tc.logText) {
					t.Errorf("takeover of a %s lease: log lacks %q:\n%s", tc.name, tc.logText, text)
				}
			})
		}
	}
}
