package postgres_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/postgres"
)

// A completion within the claim's grace leaves expires_at where the claim
// set it, so it changes no indexed column and PostgreSQL updates the row in
// place (HOT): no new entry in the key or expiry index. Work that ran past
// the grace moves the expiry, and that update cannot be HOT. The counts are
// the backend's not yet reported (pg_stat_xact_user_tables, which since
// PostgreSQL 15 also holds earlier transactions' counts until they are
// flushed), read before the claim and after the completion.
func TestCompletionStaysHOT(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool, _ := connect(t)
	drv, err := postgres.New(ctx, pool, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	const table = "idem_hot_test"
	t.Cleanup(func() {
		pool.Exec(context.Background(), "DROP TABLE IF EXISTS "+table+", "+table+"_schema, "+table+"_fence")
	})
	now := time.Date(2031, 3, 14, 12, 0, 0, 0, time.UTC)
	store, err := idem.New(drv, idem.Config{Table: table, Clock: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	grace := idem.ExpiryGrace(idem.DefaultRetention)
	for i, tc := range []struct {
		name    string
		work    time.Duration // between the claim and the completion
		wantHOT int64
	}{
		{"within the grace", grace / 2, 1},
		{"past the grace", grace + time.Second, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tx, err := pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(ctx)
			counts := func() (updated, hot int64) {
				if err := tx.QueryRow(ctx, `SELECT coalesce(sum(n_tup_upd), 0), coalesce(sum(n_tup_hot_upd), 0) FROM pg_stat_xact_user_tables WHERE relname = $1`, table).Scan(&updated, &hot); err != nil {
					t.Fatal(err)
				}
				return updated, hot
			}
			updated0, hot0 := counts()
			req := idem.Request{Scope: "s", Key: fmt.Sprintf("hot-%d", i), Fingerprint: idem.FingerprintRequest("POST", "/", nil)}
			claimed, err := store.Claim(ctx, tx, req)
			if err != nil || claimed.Outcome != idem.Won {
				t.Fatalf("Claim: %+v, %v", claimed, err)
			}
			now = now.Add(tc.work)
			if err := claimed.Complete(ctx, idem.Response{Status: 201, Body: []byte(`{"id":1}`)}); err != nil {
				t.Fatal(err)
			}
			updated, hot := counts()
			updated, hot = updated-updated0, hot-hot0
			if updated != 1 || hot != tc.wantHOT {
				t.Errorf("the completion: %d updates, %d of them HOT; want 1 and %d", updated, hot, tc.wantHOT)
			}
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}
