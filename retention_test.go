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
// grace must not wrap into an expiry in the past: a claim committed without
// its response stays in flight, and a retry answers InFlight instead of
// taking the key over and doing the work a second time.
func TestRetentionNearTheLargestDuration(t *testing.T) {
	ctx := context.Background()
	for _, retention := range []time.Duration{math.MaxInt64, math.MaxInt64 - time.Second, 24 * time.Hour} {
		db, store := openOrders(idem.Config{Retention: retention})
		req := idem.Request{Scope: "s", Key: "k", Fingerprint: idem.FingerprintRequest("POST", "/orders", nil)}
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if cl, err := store.Claim(ctx, tx, req); err != nil || cl.Outcome != idem.Won {
			t.Fatalf("retention %v: Claim: %+v, %v", retention, cl, err)
		}
		if err := tx.Commit(); err != nil { // committed without its response
			t.Fatal(err)
		}
		rec, err := store.Lookup(ctx, req.Scope, req.Key)
		if err != nil || !rec.ExpiresAt.After(time.Now().Add(retention/2)) {
			t.Errorf("retention %v: the pending record: %+v, %v; want it live for about the retention", retention, rec, err)
		}
		res, err := store.Do(ctx, req, func(context.Context, *sql.Tx) (idem.Response, error) {
			return idem.Response{Status: 201}, nil
		})
		if res.Outcome != idem.InFlight {
			t.Errorf("retention %v: a retry of the pending key: %v, %v; want in flight", retention, res.Outcome, err)
		}
		db.Close()
	}
}
