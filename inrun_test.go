package idem_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/idemkit/idem"
)

type ctxMark struct{}

// TestInRun: the context Do and DoLease give their function, and what
// derives from it, is in a run of that store and of no other; any other
// context is in none.
func TestInRun(t *testing.T) {
	db, store := openOrders(idem.Config{})
	defer db.Close()
	db2, other := openOrders(idem.Config{})
	defer db2.Close()
	ctx := t.Context()
	if store.InRun(ctx) {
		t.Error("a plain context is in a run")
	}
	check := func(name string, fnCtx context.Context) {
		t.Helper()
		derived := context.WithValue(fnCtx, ctxMark{}, 1)
		if !store.InRun(fnCtx) || !store.InRun(derived) {
			t.Errorf("%s: the function's context (or one derived from it) is not in the store's run", name)
		}
		if other.InRun(fnCtx) {
			t.Errorf("%s: the function's context is in another store's run", name)
		}
	}
	res, err := store.Do(ctx, idem.Request{Scope: "s", Key: "do", Fingerprint: idem.Fingerprint{1}}, func(ctx context.Context, _ *sql.Tx) (idem.Response, error) {
		check("Do", ctx)
		return idem.Response{}, nil
	})
	if err != nil || res.Outcome != idem.Won {
		t.Fatalf("Do: %+v, %v", res, err)
	}
	res, err = store.DoLease(ctx, idem.Request{Scope: "s", Key: "lease", Fingerprint: idem.Fingerprint{1}}, func(ctx context.Context, _ *idem.Lease[*sql.Tx]) (idem.Response, error) {
		check("DoLease", ctx)
		return idem.Response{}, nil
	})
	if err != nil || res.Outcome != idem.Won {
		t.Fatalf("DoLease: %+v, %v", res, err)
	}
	var nilStore *idem.Store[*sql.Tx]
	if nilStore.InRun(ctx) {
		t.Error("a nil store reports a run")
	}
}
