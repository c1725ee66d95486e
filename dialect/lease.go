package dialect

import (
	"context"
	"errors"
	"time"
)

// Leaser is the contract of idem's lease mode, an optional ability of a
// Dialect. In lease mode the claim commits on its own, as a pending record
// that holds a lease (an expiry, LeaseUntil) and a fencing token; the work
// runs outside any long transaction, and every later write of the holder
// (extending the lease, recording a step, completing, releasing) is an
// UPDATE guarded by the token, so a holder whose lease was taken over can
// change nothing. A takeover increments the token.
//
// The core runs each method in a short transaction it begins (READ
// COMMITTED where the database has levels) and commits. A Dialect without
// Leaser cannot run lease mode: Store.Lease fails with ErrInvalidConfig.
//
// Invariants every implementation keeps:
//
//   - expires_at >= lease_until: a write that sets lease_until sets
//     expires_at = max(expires_at, lease_until), so a record whose retention
//     has passed never holds a live lease, and Purge (expires_at <= now)
//     never deletes one;
//   - a takeover of any kind sets token = token + 1; a fresh insert has
//     token 1 in lease mode (0 for a single-transaction claim, which then
//     never holds a lease);
//   - a record taken over because its retention passed is a new intention:
//     new fingerprint and created_at, no step, no response; a record taken
//     over because its lease expired is the same intention resumed: same
//     created_at and step.
type Leaser interface {
	// InsertLease inserts a pending record holding a lease until
	// a.Now+a.Lease, with token 1, expiring a.Retention after a.Now (or at
	// the lease's end, if later). It reports false, changing nothing, when
	// the key has a record. It waits at most a.WaitBound for a transaction
	// that holds the key.
	InsertLease(ctx context.Context, q Queryer, t Table, a LeaseArgs) (won bool, err error)

	// TakeLease takes the record over when its retention has passed (a new
	// intention: it becomes a fresh pending record for a.Fingerprint), or
	// when it is pending with a.Fingerprint and its lease has expired (the
	// intention resumed: same created_at and step). Either way the token
	// becomes one more and the lease runs until a.Now+a.Lease. It reports
	// false, changing nothing, otherwise; resumed tells the second kind
	// from the first. Each condition is in the UPDATE's WHERE, so of two
	// takeovers racing one wins: the other waits for the first's row lock,
	// then finds the condition false.
	TakeLease(ctx context.Context, q Queryer, t Table, a LeaseArgs) (won, resumed bool, err error)

	// ExtendLease moves the lease's end to a.Now+a.Lease. ErrLeaseLost when
	// no pending record has a.Token.
	ExtendLease(ctx context.Context, q Queryer, t Table, a FenceArgs) error

	// RecordStep stores a.Step and a.Data as the record's last recovery
	// point and extends the lease like ExtendLease. ErrLeaseLost when no
	// pending record has a.Token.
	RecordStep(ctx context.Context, q Queryer, t Table, a StepArgs) error

	// CompleteLease stores the response, ends the lease (lease_until NULL)
	// and sets the expiry to a.Now+a.Retention, like Complete. ErrLeaseLost
	// when no pending record has a.Token.
	CompleteLease(ctx context.Context, q Queryer, t Table, a CompleteLeaseArgs) error

	// ReleaseLease ends the lease at once (lease_until = now), keeping the
	// token, the step and the pending state, so the next claim resumes the
	// work. ErrLeaseLost when no pending record has a.Token.
	ReleaseLease(ctx context.Context, q Queryer, t Table, a FenceArgs) error

	// ExpiredLeases lists up to a.Limit pending records whose lease has
	// expired and whose retention has not: work nobody is doing, to be
	// resumed. Oldest lease first.
	ExpiredLeases(ctx context.Context, q Queryer, t Table, a ExpiredLeasesArgs) ([]Record, error)
}

// ErrLeaseLost means a fenced write found no pending record with the holder's
// token: the lease was taken over (or the record completed, released and
// resumed, or purged). The holder must stop; nothing was written.
var ErrLeaseLost = errors.New("lease lost")

// LeaseArgs are the values of a lease claim.
type LeaseArgs struct {
	// Scope, Key and Fingerprint identify the request, as in ClaimArgs.
	Scope, Key  string
	Fingerprint []byte
	// Now is the store's clock; the zero time means the database's clock.
	Now time.Time
	// Retention is the record's life after its claim.
	Retention time.Duration
	// Lease is how long the lease lasts from Now.
	Lease time.Duration
	// WaitBound bounds a wait for a transaction that holds the key.
	WaitBound time.Duration
}

// FenceArgs name the lease a holder writes under.
type FenceArgs struct {
	// Scope and Key identify the record.
	Scope, Key string
	// Token is the holder's fencing token.
	Token int64
	// Now is the store's clock; the zero time means the database's clock.
	Now time.Time
	// Lease is how long the lease lasts from Now after an extension.
	Lease time.Duration
}

// StepArgs are a recovery point.
type StepArgs struct {
	FenceArgs
	// Step names the last finished step; Data is its small payload (a
	// provider's charge id, say).
	Step string
	Data []byte
}

// CompleteLeaseArgs are a lease's completion.
type CompleteLeaseArgs struct {
	FenceArgs
	// Status, Header and Body are the response, as in CompleteArgs.
	Status int
	Header []byte
	Body   []byte
	// Retention is the record's life after its completion.
	Retention time.Duration
}

// ExpiredLeasesArgs bound a listing of expired leases.
type ExpiredLeasesArgs struct {
	// Now is the store's clock; the zero time means the database's clock.
	Now time.Time
	// Limit is the most records returned.
	Limit int
}
