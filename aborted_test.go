package idem_test

import (
	"context"
	"errors"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/dialect"
)

// errRawAborted is what the fake database says to every statement after
// one of the transaction's failed, classified as PostgreSQL's 25P02 is.
var errRawAborted = dialect.Classified(dialect.ErrTxAborted, errors.New("fake: current transaction is aborted"))

// TestDoAfterAbortedTransaction: when the completion (or the COMMIT it
// goes with) meets a transaction a failed statement aborted, Do rolls back
// and commits nothing; a 4xx is returned as the function's answer with
// NotStored set, any other answer is an error matching ErrTxAborted that
// Do does not retry.
func TestDoAfterAbortedTransaction(t *testing.T) {
	for _, tc := range []struct {
		name     string
		atCommit bool // the completion went with COMMIT (pgx)
		status   int
		stored   bool // returned as an answer, not an error
	}{
		{"409 at completion", false, 409, true},
		{"409 at commit", true, 409, true},
		{"404 at completion", false, 404, true},
		{"201 at completion", false, 201, false},
		{"201 at commit", true, 201, false},
		{"303 at completion", false, 303, false},
		{"no status at completion", false, idem.NoStatus, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store, f, err := newFakeStore(idem.Config{ReadFirst: idem.ReadFirstNever})
			if err != nil {
				t.Fatal(err)
			}
			if tc.atCommit {
				f.commitErr = errRawAborted
			} else {
				f.complete = func(dialect.CompleteArgs) error { return errRawAborted }
			}
			calls := 0
			res, err := store.Do(t.Context(), fakeRequest("k"), func(context.Context, *fakeTx) (idem.Response, error) {
				calls++
				return idem.Response{Status: tc.status, Body: []byte("answer")}, nil
			})
			if tc.stored {
				if err != nil || res.Outcome != idem.Won || res.Committed || res.Response.Status != tc.status || !errors.Is(res.NotStored, idem.ErrTxAborted) {
					t.Fatalf("Do: %+v, %v; want the %d won, not committed, NotStored matching ErrTxAborted", res, err, tc.status)
				}
			} else {
				if !errors.Is(err, idem.ErrTxAborted) || idem.Retryable(err) || res.Outcome != 0 {
					t.Fatalf("Do: %+v, %v; want an error matching ErrTxAborted that is not retryable", res, err)
				}
			}
			if calls != 1 || f.begins() != 1 {
				t.Errorf("the function ran %d times in %d transactions, want once", calls, f.begins())
			}
			if open := f.openTxs(); open != 0 || f.txs[0].committed {
				t.Errorf("%d transactions left open, committed %v; want it rolled back", open, f.txs[0].committed)
			}
		})
	}
}
