package idem_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/dialect"
)

// TestReadFirstPolicy: ReadFirstAuto claims while requests are new, starts
// reading first once about a quarter of recent claims found their work done
// (the tenth replay in a row), answers replays from the read then, and goes
// back to claiming once new requests dominate again. ReadFirstNever never
// reads; ReadFirstAlways always does.
func TestReadFirstPolicy(t *testing.T) {
	done := func(key string) dialect.Record {
		req := fakeRequest(key)
		return dialect.Record{Scope: req.Scope, Key: req.Key, Fingerprint: req.Fingerprint[:], State: dialect.Completed,
			Status: 201, Header: []byte{}, Body: []byte("done")}
	}
	// settled says whether the fake holds a completed record for a key:
	// the phases below switch between retries and new requests.
	type phase struct {
		requests int
		settled  bool
		// lookups is how many of the phase's requests read first.
		lookups int
	}
	for _, tc := range []struct {
		policy idem.ReadFirstPolicy
		phases []phase
	}{
		{idem.ReadFirstAuto, []phase{
			{requests: 20, settled: false, lookups: 0}, // new requests: claims only
			{requests: 10, settled: true, lookups: 0},  // retries begin: 1-(31/32)^10 = 0.27 after the tenth
			{requests: 30, settled: true, lookups: 30}, // an incident: every retry answered by a read
			{requests: 34, settled: false, lookups: 34},
			// 0.72 * (31/32)^34 < 0.25: the 35th new request in a row
			// claims without reading.
			{requests: 5, settled: false, lookups: 0},
		}},
		{idem.ReadFirstNever, []phase{{requests: 60, settled: true, lookups: 0}}},
		{idem.ReadFirstAlways, []phase{{requests: 10, settled: false, lookups: 10}, {requests: 10, settled: true, lookups: 10}}},
	} {
		t.Run(tc.policy.String(), func(t *testing.T) {
			store, f, err := newFakeStore(idem.Config{ReadFirst: tc.policy})
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			for i, p := range tc.phases {
				f.claim = func(_ context.Context, _ int, a dialect.ClaimArgs) (dialect.ClaimResult, error) {
					if p.settled {
						return dialect.ClaimResult{Record: done(a.Key)}, nil
					}
					return dialect.ClaimResult{Won: true}, nil
				}
				f.lookup = func(a dialect.LookupArgs) (dialect.Record, bool, error) {
					if p.settled {
						return done(a.Key), true, nil
					}
					return dialect.Record{}, false, nil
				}
				before := f.lookups
				for range p.requests {
					n++
					res, err := store.Do(context.Background(), fakeRequest(fmt.Sprintf("k-%d", n)), func(context.Context, *fakeTx) (idem.Response, error) {
						return idem.Response{Status: 201}, nil
					})
					want := idem.Won
					if p.settled {
						want = idem.Replay
					}
					if err != nil || res.Outcome != want {
						t.Fatalf("phase %d, request %d: %v, %v; want %v", i, n, res.Outcome, err, want)
					}
				}
				if got := f.lookups - before; got != p.lookups {
					t.Errorf("phase %d (%d requests, settled %v): %d read first, want %d", i, p.requests, p.settled, got, p.lookups)
				}
			}
		})
	}
}

// TestReadFirstPolicyInvalid: a policy that is not one of the three is a
// configuration error.
func TestReadFirstPolicyInvalid(t *testing.T) {
	for _, p := range []idem.ReadFirstPolicy{-1, 3} {
		if _, _, err := newFakeStore(idem.Config{ReadFirst: p}); !errors.Is(err, idem.ErrInvalidConfig) {
			t.Errorf("ReadFirst %v: %v, want ErrInvalidConfig", p, err)
		}
	}
}
