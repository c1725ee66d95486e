package idem_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idemkit/idem"
)

// TestNotFoundSays: the reads that see live records only say whether the
// key has no record or one that expired; Inspect and Delete, which see
// expired records too, say "no record".
func TestNotFoundSays(t *testing.T) {
	ctx := t.Context()
	now := time.Date(2031, 3, 14, 12, 0, 0, 0, time.UTC)
	db, store := openOrders(idem.Config{Clock: func() time.Time { return now }, Lease: time.Minute})
	defer db.Close()
	scope := idem.Scope("tenant-42", "POST /orders")
	seedExample(ctx, db, store, scope, "a1")
	now = now.Add(25 * time.Hour)

	for _, tc := range []struct {
		name string
		err  func() error
		want string
	}{
		{"Lookup of an expired record", func() error { _, err := store.Lookup(ctx, scope, "a1"); return err }, "the record of key \"a1\" in scope " + `"\"tenant-42\" POST /orders"` + " expired at 2031-03-15T12:01:00Z"},
		{"Lookup of no record", func() error { _, err := store.Lookup(ctx, scope, "nope"); return err }, "no record of key \"nope\""},
		{"Resume of an expired record", func() error { _, err := store.Resume(ctx, scope, "a1"); return err }, "expired at"},
		{"Inspect of no record", func() error { _, err := store.Inspect(ctx, scope, "nope"); return err }, "no record of key \"nope\""},
		{"Delete of no record", func() error { return store.Delete(ctx, scope, "nope") }, "no record of key \"nope\""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.err()
			if !errors.Is(err, idem.ErrNotFound) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want ErrNotFound saying %s", err, tc.want)
			}
			if strings.Contains(tc.want, "no record") && strings.Contains(err.Error(), "live") {
				t.Errorf("error %v speaks of a live record where there is none at all", err)
			}
		})
	}
}
