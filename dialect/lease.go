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
// UPDATE guarded by the token and the request's fingerprint, matching only
// a pending record that holds a lease (lease_until set: never one a
// single-transaction claim made), so a holder whose lease was taken over,
// or whose record was deleted and claimed afresh, can change nothing.
//
// The core runs each method in a short transaction it begins (READ
// COMMITTED where the database has levels) and commits. A claim runs
// InsertLease, then reads the key; only when that read shows a record it
// may take over does it begin a second transaction for TakeExpired or
// ResumeLease. So a lost insert never goes on to write in its transaction:
// on InnoDB a duplicate-key error leaves a shared lock on the existing row,
// and a write after it would deadlock with every other loser doing the
// same. A Dialect without Leaser cannot run lease mode: Store.Lease fails
// with an error wrapping errors.ErrUnsupported.
//
// A key's lease tokens never repeat, across all its lifetimes: each table
// has a token floor, the largest token of any record deleted from it (table
// <name>_fence, made by the schema's migrations). Purge and Admin.Delete
// raise it, in the transaction that deletes, to the largest token they
// delete; a record that starts a new intention (InsertLease, TakeExpired)
// gets a token above both the floor and the token the row had. The floor
// is read once the row is the transaction's own: a read before that could
// predate the commit of a delete the statement waited for. Records deleted
// other than through Purge or Admin.Delete do not raise the floor; the
// fingerprint in every fenced write still refuses a stale holder whose
// request differs from the new intention's. A record claimed in one
// transaction (Dialect.Claim) takes the row's token plus one, floor or
// not, and holds no lease: every fenced write (ExtendLease, RecordStep,
// CompleteLease, ReleaseLease) takes only a record whose lease_until is
// set, so a stale holder whose token such a record happens to carry is
// refused.
//
// Invariants every implementation keeps:
//
//   - expires_at >= lease_until: a write that sets lease_until to a
//     lease's end sets expires_at = max(expires_at, lease_until), so a
//     record whose retention has passed never holds a live lease, and Purge
//     (expires_at <= now) never deletes one (ReleaseLease sets lease_until
//     to the claim's time, an end already past);
//   - a takeover sets a token greater than the row's; a new intention
//     (InsertLease, TakeExpired) one greater than the floor as well; a
//     single-transaction claim never holds a lease;
//   - a record taken over because its retention passed is a new intention:
//     new fingerprint and created_at, no step, no response; a record taken
//     over because its lease expired is the same intention resumed: same
//     created_at and step.
type Leaser interface {
	// InsertLease inserts a pending record holding a lease until
	// a.Now+a.Lease, expiring a.Retention after a.Now (or at the lease's
	// end, if later), with a token one more than the table's token floor.
	// It reports false, changing nothing, when the key has a record. It
	// waits at most a.WaitBound for a transaction that holds the key.
	InsertLease(ctx context.Context, q Queryer, t Table, a LeaseArgs) (won bool, err error)

	// TakeExpired takes over the key's record when its retention has
	// passed: a new intention, a fresh pending record for a.Fingerprint
	// with a lease until a.Now+a.Lease and a token above the row's and the
	// floor. It reports false, changing nothing, otherwise. The condition
	// is in the UPDATE's WHERE, so of two takeovers racing one wins: the
	// other waits for the first's row lock, then finds the condition false.
	TakeExpired(ctx context.Context, q Queryer, t Table, a LeaseArgs) (won bool, err error)

	// ResumeLease takes over the key's record when it is pending with
	// a.Fingerprint, within its retention, and its lease has expired (or
	// was released): the same intention resumed, with the same created_at
	// and step, the token one more and the lease until a.Now+a.Lease. It
	// reports false, changing nothing, otherwise; like TakeExpired, one of
	// two racing resumes wins.
	ResumeLease(ctx context.Context, q Queryer, t Table, a LeaseArgs) (won bool, err error)

	// ExtendLease moves the lease's end to a.Now+a.Lease and returns it.
	// ErrLeaseLost when no pending record holding a lease has a.Token and
	// a.Fingerprint.
	ExtendLease(ctx context.Context, q Queryer, t Table, a FenceArgs) (until time.Time, err error)

	// RecordStep stores a.Step and a.Data as the record's last recovery
	// point and extends the lease like ExtendLease, returning its new end.
	// ErrLeaseLost when no pending record holding a lease has a.Token and
	// a.Fingerprint.
	RecordStep(ctx context.Context, q Queryer, t Table, a StepArgs) (until time.Time, err error)

	// CompleteLease stores the response, ends the lease (lease_until NULL)
	// and sets the expiry to a.Now+a.Retention, like Complete. ErrLeaseLost
	// when no pending record holding a lease has a.Token and a.Fingerprint.
	CompleteLease(ctx context.Context, q Queryer, t Table, a CompleteLeaseArgs) error

	// ReleaseLease ends the lease at once, keeping the token, the step and
	// the pending state, so the next claim resumes the work. It sets
	// lease_until = min(created_at, now): the claim's time, which no lease
	// granted or extended ends at, so the core tells a released lease from
	// one that lapsed (it logs only the latter as a warning); the min keeps
	// the lease ended under a clock that went backwards. ErrLeaseLost when no pending record holding a lease has a.Token
	// and a.Fingerprint.
	ReleaseLease(ctx context.Context, q Queryer, t Table, a FenceArgs) error

	// ExpiredLeases lists up to a.Limit pending records whose lease has
	// expired and whose retention has not: work nobody is doing, to be
	// resumed. Oldest lease first.
	ExpiredLeases(ctx context.Context, q Queryer, t Table, a ExpiredLeasesArgs) ([]Record, error)
}

// ErrLeaseLost means a fenced write found no pending record with the holder's
// token and fingerprint: the lease was taken over (or the record completed,
// released and resumed, deleted, or purged, and perhaps claimed afresh). The
// holder must stop; nothing was written.
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
	// Token is the holder's fencing token: it never repeats for the key,
	// so it names the holder and its intention.
	Token int64
	// Fingerprint is the request's, checked too: a write never lands on
	// the record of another request.
	Fingerprint []byte
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
