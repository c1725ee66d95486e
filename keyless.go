package idem

import "context"

// Keyless reports to the store's Observer that a transport in optional-key
// mode let a request without an idempotency key through, unprotected, on
// the endpoint whose scope would have been scope (EventKeyless). It does
// not touch the database. idemhttp calls it; a transport of your own that
// adopts keys gradually can too, so the share of keyless requests can be
// watched fall to zero before keys become required.
func (s *Store[TTx]) Keyless(ctx context.Context, scope string) {
	s.emit(ctx, Event{Kind: EventKeyless, Scope: scope})
}
