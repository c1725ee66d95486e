package idem_test

import (
	"context"
	"database/sql"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/conformance"
	"github.com/idemkit/idem/dialect"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/sqlite"
)

// lateDriver holds a COMMIT back, once armed, until the context it runs on
// has ended: the commit timeout passes before COMMIT is sent.
type lateDriver struct {
	*sqlite.Driver
	armed *atomic.Bool
}

func (d lateDriver) Begin(ctx context.Context, opts dialect.BeginOptions) (dialect.Tx[*sql.Tx], error) {
	tx, err := d.Driver.Begin(ctx, opts)
	if err != nil {
		return nil, err
	}
	return &conformance.WrappedTx[*sql.Tx]{Tx: tx, OnCommit: func(ctx context.Context, tx dialect.Tx[*sql.Tx]) error {
		if d.armed.CompareAndSwap(true, false) {
			select {
			case <-ctx.Done():
			case <-time.After(10 * time.Second):
			}
		}
		return tx.Commit(ctx)
	}}, nil
}

// TestDoLeaseCommitTimeout: when the commit timeout passes while DoLease
// completes the lease, the error says so (ErrCommitTimeout, as the
// context's cause), not a bare deadline, and Retryable says a retry is
// worth it. The lease is released all the same (within a timeout of its
// own), so the retry takes the work over at once.
func TestDoLeaseCommitTimeout(t *testing.T) {
	lite := idemtest.NewSQLite(t, idem.Config{})
	var armed atomic.Bool
	store, err := idem.New[*sql.Tx](lateDriver{Driver: lite.Driver, armed: &armed}, idem.Config{CommitTimeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	req := idem.Request{Scope: "tenant-1 POST /payments", Key: "late", Fingerprint: idem.FingerprintRequest("POST", "/payments", nil)}
	_, err = store.DoLease(t.Context(), req, func(context.Context, *idem.Lease[*sql.Tx]) (idem.Response, error) {
		armed.Store(true) // the completion's COMMIT
		return idem.Response{Status: 201}, nil
	})
	if !errors.Is(err, idem.ErrCommitTimeout) || !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		t.Fatalf("DoLease whose completion outlived the commit timeout: %v, want ErrCommitTimeout and context.DeadlineExceeded, not context.Canceled", err)
	}
	if !idem.Retryable(err) {
		t.Errorf("Retryable(%v) = false, want true", err)
	}
	l, err := store.Lease(t.Context(), req)
	if err != nil || l.Outcome != idem.Won || !l.Resumed() {
		t.Fatalf("Lease after the timed-out completion: %+v, %v; want the released lease taken over at once", l, err)
	}
}
