package idem

import (
	"context"

	"github.com/idemkit/idem/dialect"
)

// Answered reports what the live record of scope and key answers a request
// with fingerprint fp, without claiming anything: Replay with the stored
// response (completed, same fingerprint), Mismatch (another fingerprint),
// or InFlight with the record (pending). found is false when no live
// record holds the key.
//
// The transports use it to honour records stored under an earlier scope
// form for one retention window after an upgrade (idemhttp's, idemgrpc's
// and idemqueue's Config.FormerScopes): a retry that straddles the upgrade
// then gets the first attempt's answer instead of doing the work again.
// It reads outside any transaction, so a record written after it reads is
// not seen.
func (s *Store[TTx]) Answered(ctx context.Context, scope, key string, fp Fingerprint) (res Result, found bool, err error) {
	req := Request{Scope: scope, Key: key}
	if err := req.Validate(); err != nil {
		return Result{}, false, err
	}
	// One read: Lookup would read again on a miss, to say why.
	d, found, err := s.d.Lookup(ctx, s.driver.Pool(), s.table, dialect.LookupArgs{Scope: scope, Key: key, Now: s.now()})
	if err != nil {
		return Result{}, false, s.failed(ctx, "lookup", req, s.d.Classify(err))
	}
	if !found {
		return Result{}, false, nil
	}
	rec, err := toRecord(d)
	switch {
	case err != nil:
		return Result{}, false, err
	case rec.Fingerprint != fp:
		return Result{Outcome: Mismatch, Record: rec}, true, nil
	case !rec.Completed:
		return Result{Outcome: InFlight, Record: rec}, true, nil
	}
	return Result{Outcome: Replay, Response: rec.Response, Record: rec}, true, nil
}
