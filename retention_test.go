package idem_test

import (
	"context"
	"database/sql"
	"math"
	"testing"
	"time"

	"github.com/idemkit/idem"
)

// A retention near the largest Duration ("keep for ever") plus the claim's
// grace must not wrap into an expiry in the past: the record stays live and
// a retry replays instead of doing the work again.
func TestRetentionNearTheLargestDuration(t *testing.T) {
	ctx := context.Background()
	for _, retention := range []time.Duration{math.MaxInt64, math.MaxInt64 - time.Second, 24 * time.Hour} {
		db, store := openOrders(idem.Config{Retention: retention})
		req := idem.Request{Scope: "s", Key: "k", Fingerprint: idem.FingerprintRequest("POST", "/orders", nil)}
		runs := 0
		for range 2 {
			if _, err := store.Do(ctx, req, func(context.Context, *sql.Tx) (idem.Response, error) {
				runs++
				return idem.Response{Status: 201}, nil
			}); err != nil {
				t.Fatalf("retention %v: %v", retention, err)
			}
		}
		rec, err := store.Lookup(ctx, req.Scope, req.Key)
		switch {
		case err != nil:
			t.Errorf("retention %v: Lookup: %v", retention, err)
		case runs != 1:
			t.Errorf("retention %v: the work ran %d times, want once (the retry replays)", retention, runs)
		case !rec.ExpiresAt.After(time.Now().Add(retention / 2)):
			t.Errorf("retention %v: the record expires %v", retention, rec.ExpiresAt)
		}
		db.Close()
	}
}
