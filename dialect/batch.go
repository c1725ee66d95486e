package dialect

import (
	"context"
	"fmt"
	"time"
)

// Batches (idem's Store.DoBatch) claim and complete many keys in one
// transaction. Both are optional abilities of a Dialect, reached through
// ClaimBatch and CompleteBatch, which fall back to Claim and Complete key by
// key in the same transaction when the Dialect lacks them: the outcome is
// the same either way, only the number of statements differs.

// BatchKey is one key of a batch claim.
type BatchKey struct {
	// Scope and Key identify the record (validated by the core).
	Scope, Key string
	// Fingerprint is the request's 32-byte SHA-256.
	Fingerprint []byte
}

// BatchClaimArgs are the values of one batch claim.
type BatchClaimArgs struct {
	// Keys are the keys to claim, distinct and sorted by (Scope, Key) in
	// byte order, so that two batches sharing keys lock them in the same
	// order and cannot deadlock on each other.
	Keys []BatchKey
	// Now, Retention and WaitBound are as in ClaimArgs, shared by every
	// key.
	Now       time.Time
	Retention time.Duration
	WaitBound time.Duration
}

// BatchClaimer is a Dialect that claims many keys with one statement (or a
// fixed few), not one per key.
//
// ClaimBatch claims every key of a.Keys with the rules of Dialect.Claim,
// key by key: a new key or one whose retention passed is won (taking the
// expired record over), any other is lost and its ClaimResult carries the
// live record as the latest committed state holds it. The results are in
// the order of a.Keys. Waits for transactions holding keys are bounded by
// a.WaitBound (the bound may cover the whole statement rather than each
// key); past it ClaimBatch returns an error Classify maps to
// ErrLockTimeout, and the core rolls the transaction back, so what the
// statement did before the timeout does not matter. A record that vanished
// between the claim and the read of the lost keys is an error classified
// ErrSerialization (the core retries), as in Claim.
//
// Fallback: ClaimBatch calls Claim for each key in order.
type BatchClaimer interface {
	ClaimBatch(ctx context.Context, q Queryer, t Table, a BatchClaimArgs) ([]ClaimResult, error)
}

// ClaimBatch claims a.Keys on q: with one statement when d is a
// BatchClaimer, else with Claim key by key in order. The results are in the
// order of a.Keys.
func ClaimBatch(ctx context.Context, d Dialect, q Queryer, t Table, a BatchClaimArgs) ([]ClaimResult, error) {
	if b, ok := d.(BatchClaimer); ok {
		res, err := b.ClaimBatch(ctx, q, t, a)
		if err == nil && len(res) != len(a.Keys) {
			return nil, fmt.Errorf("%w: %s's ClaimBatch returned %d results for %d keys", ErrInvalidConfig, d.Name(), len(res), len(a.Keys))
		}
		return res, err
	}
	res := make([]ClaimResult, len(a.Keys))
	for i, k := range a.Keys {
		r, err := d.Claim(ctx, q, t, ClaimArgs{
			Scope: k.Scope, Key: k.Key, Fingerprint: k.Fingerprint,
			Now: a.Now, Retention: a.Retention, WaitBound: a.WaitBound,
		})
		if err != nil {
			return nil, err
		}
		res[i] = r
	}
	return res, nil
}

// BatchCompleter is a Dialect that stores the responses of many claimed
// keys with one statement (or a fixed few).
//
// CompleteBatch does what Complete does for each element of a (every one
// names a record the transaction claimed, in (Scope, Key) order); when any
// of them finds no pending record to complete, it returns an error wrapping
// ErrNotClaimed, and the core rolls the transaction back.
//
// Fallback: CompleteBatch calls Complete for each element in order.
type BatchCompleter interface {
	CompleteBatch(ctx context.Context, q Queryer, t Table, a []CompleteArgs) error
}

// CompleteBatch completes every element of a on q: with one statement when
// d is a BatchCompleter, else with Complete one by one.
func CompleteBatch(ctx context.Context, d Dialect, q Queryer, t Table, a []CompleteArgs) error {
	if len(a) == 0 {
		return nil
	}
	if b, ok := d.(BatchCompleter); ok {
		return b.CompleteBatch(ctx, q, t, a)
	}
	for _, c := range a {
		if err := d.Complete(ctx, q, t, c); err != nil {
			return err
		}
	}
	return nil
}
