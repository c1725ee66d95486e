package idem_test

import (
	"context"
	"errors"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/dialect"
)

// TestDoReadsAfterItsTransactionEnds: when Do reads the key through the
// pool after its claim waited out the bound, or after its function ended
// the transaction itself, its own transaction has already ended: on a pool
// of one connection it holds the only one, and the read would wait for it.
func TestDoReadsAfterItsTransactionEnds(t *testing.T) {
	for _, tc := range []struct {
		name  string
		claim func(context.Context, int, dialect.ClaimArgs) (dialect.ClaimResult, error)
		done  error // Complete's error
	}{
		{name: "claim waited out its bound", claim: func(context.Context, int, dialect.ClaimArgs) (dialect.ClaimResult, error) {
			return dialect.ClaimResult{}, errRawLockTimeout
		}},
		{name: "function ended the transaction", done: dialect.Classified(dialect.ErrTxDone, errors.New("fake: transaction already committed"))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store, f, err := newFakeStore(idem.Config{ReadFirst: idem.ReadFirstNever})
			if err != nil {
				t.Fatal(err)
			}
			f.claim = tc.claim
			if tc.done != nil {
				f.complete = func(dialect.CompleteArgs) error { return tc.done }
			}
			openAtRead := -1
			f.lookup = func(dialect.LookupArgs) (dialect.Record, bool, error) {
				openAtRead = f.openTxs()
				return dialect.Record{}, false, nil
			}
			_, _ = store.Do(t.Context(), fakeRequest("k"), func(context.Context, *fakeTx) (idem.Response, error) {
				return idem.Response{Status: 201}, nil
			})
			if openAtRead != 0 {
				t.Fatalf("the key was read with %d of Do's transactions open, want 0 (-1: not read at all)", openAtRead)
			}
		})
	}
}
