package idem_test

import (
	"context"
	"errors"
	"testing"

	"github.com/idemkit/idem"
)

// TestMissingAbilityIsUnsupported: a dialect without lease mode
// (dialect.Leaser) or the admin view (dialect.Admin) makes what needs them
// fail with one signal, errors.ErrUnsupported, never ErrInvalidConfig (the
// store's configuration is fine; the dialect lacks the ability).
func TestMissingAbilityIsUnsupported(t *testing.T) {
	s, _, err := newFakeStore(idem.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	req := fakeRequest("k")
	for _, tc := range []struct {
		name string
		call func() error
	}{
		{"Lease", func() error { _, err := s.Lease(ctx, req); return err }},
		{"DoLease", func() error {
			_, err := s.DoLease(ctx, req, func(context.Context, *idem.Lease[*fakeTx]) (idem.Response, error) {
				return idem.Response{Status: 200}, nil
			})
			return err
		}},
		{"Resume", func() error { _, err := s.Resume(ctx, req.Scope, req.Key); return err }},
		{"ExpiredLeases", func() error { _, err := s.ExpiredLeases(ctx, 10); return err }},
		{"Inspect", func() error { _, err := s.Inspect(ctx, req.Scope, req.Key); return err }},
		{"List", func() error { _, err := s.List(ctx, idem.ListFilter{}); return err }},
		{"Delete", func() error { return s.Delete(ctx, req.Scope, req.Key) }},
		{"ForceDelete", func() error { return s.ForceDelete(ctx, req.Scope, req.Key) }},
		{"Counts", func() error { _, err := s.Counts(ctx, ""); return err }},
	} {
		err := tc.call()
		if !errors.Is(err, errors.ErrUnsupported) || errors.Is(err, idem.ErrInvalidConfig) {
			t.Errorf("%s on a dialect without the ability: %v, want errors.ErrUnsupported (and not ErrInvalidConfig)", tc.name, err)
		}
	}
}

// TestTxEndedErrorMatches: a *TxEndedError (Do's function ended the
// transaction itself) matches ErrTxDone whatever the driver's error is, and
// still holds that error.
func TestTxEndedErrorMatches(t *testing.T) {
	driverErr := errors.New("driver: transaction already closed")
	err := error(&idem.TxEndedError{Scope: "s", Key: "k", Err: driverErr})
	if !errors.Is(err, idem.ErrTxDone) || !errors.Is(err, driverErr) {
		t.Errorf("%v: want it to match ErrTxDone and the driver's error", err)
	}
}
