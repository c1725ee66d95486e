package idem_test

import (
	"context"
	"database/sql"
	"testing"

	"github.com/idemkit/idem"
)

// TestInRun: the context Do and DoLease give their function is in a run of
// their store, and of no other; a run of another store inside it is in
// both; the caller's own context is in none.
func TestInRun(t *testing.T) {
	dbA, a := openOrders(idem.Config{})
	defer dbA.Close()
	dbB, b := openOrders(idem.Config{})
	defer dbB.Close()
	req := func(key string) idem.Request {
		return idem.Request{Scope: idem.Scope("tenant-1", "job"), Key: key, Fingerprint: idem.FingerprintRequest("POST", "/job", nil)}
	}
	ok := idem.Response{Status: 200}
	var inA, inB, nestedA, nestedB, leaseA, leaseB bool
	_, err := a.Do(t.Context(), req("do"), func(ctx context.Context, _ *sql.Tx) (idem.Response, error) {
		inA, inB = a.InRun(ctx), b.InRun(ctx)
		_, err := b.Do(ctx, req("nested"), func(ctx context.Context, _ *sql.Tx) (idem.Response, error) {
			nestedA, nestedB = a.InRun(ctx), b.InRun(ctx)
			return ok, nil
		})
		return ok, err
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.DoLease(t.Context(), req("lease"), func(ctx context.Context, _ *idem.Lease[*sql.Tx]) (idem.Response, error) {
		leaseA, leaseB = a.InRun(ctx), b.InRun(ctx)
		return ok, nil
	}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name      string
		got, want bool
	}{
		{"a's Do: in a", inA, true},
		{"a's Do: in b", inB, false},
		{"b's Do inside a's: in a", nestedA, true},
		{"b's Do inside a's: in b", nestedB, true},
		{"a's DoLease: in a", leaseA, true},
		{"a's DoLease: in b", leaseB, false},
		{"the caller's context: in a", a.InRun(t.Context()), false},
		{"a nil store", (*idem.Store[*sql.Tx])(nil).InRun(t.Context()), false},
	} {
		if c.got != c.want {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
}
