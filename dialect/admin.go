package dialect

import (
	"context"
	"time"
	"unicode/utf8"
)

// Admin is a Dialect that lets operators see and act on records beyond the
// lifecycle: read one record whatever its state or expiry, list records by
// scope prefix, state and age a page at a time, delete one record, and count
// records by state. Each method runs on the Queryer it is given (the pool,
// outside any transaction; a transaction of the core's for Delete) and must
// not wait longer than its context allows.
//
// Absence: a Dialect that does not implement Admin still runs the whole
// lifecycle; the Store's admin methods (Inspect, List, Delete, Counts) then
// fail with an error wrapping errors.ErrUnsupported, and nothing else
// changes. A wrapper around a Dialect keeps the ability by implementing
// Admin with calls to what it wraps.
//
// Records are described by State, never by the columns that encode it, so a
// dialect that grows a state maps it in its own Admin code and callers see
// it by name (State.String).
type Admin interface {
	// Inspect reads the record of a.Scope and a.Key, live or expired, with
	// the sizes of its stored header and body instead of their bytes. It
	// reports found=false when the table has no row for the key.
	Inspect(ctx context.Context, q Queryer, t Table, a LookupArgs) (rec RecordInfo, found bool, err error)

	// List returns at most a.Limit records that match a's filters, in the
	// order of (scope, key) byte by byte, starting after a.After when it is
	// set (keyset paging: a page costs the same wherever it starts).
	List(ctx context.Context, q Queryer, t Table, a ListArgs) ([]RecordInfo, error)

	// Delete deletes the record of a.Scope and a.Key, in the transaction q
	// the core began (at READ COMMITTED where the database has levels), and
	// reports how many rows it deleted (0 or 1). Unless a.Force is set, it
	// deletes a record only when no claim may still be working on it: a
	// record that is completed, or expired. A pending record that is still
	// live is kept (0 rows); the core then tells the caller why. A Dialect
	// that is a Leaser raises the table's token floor to the deleted
	// record's token in the same transaction (see Leaser).
	Delete(ctx context.Context, q Queryer, t Table, a DeleteArgs) (int64, error)

	// Count counts the records whose scope starts with a.ScopePrefix ("":
	// every record), by state and by whether they have expired.
	Count(ctx context.Context, q Queryer, t Table, a CountArgs) ([]StateCount, error)
}

// RecordInfo is what an operator sees of one record: its identity, state
// and times, and the sizes of its stored response rather than the response.
type RecordInfo struct {
	// Scope and Key identify the record.
	Scope, Key string
	// Fingerprint is the stored request hash.
	Fingerprint []byte
	// State is where the record is in the lifecycle.
	State State
	// Status is the stored response's status (0 while pending).
	Status int
	// HeaderBytes and BodyBytes are the sizes of the stored header
	// (idem's encoding) and body; 0 while pending.
	HeaderBytes, BodyBytes int64
	// CreatedAt is the claim time; ExpiresAt is when the record may be
	// claimed afresh. Both are UTC.
	CreatedAt, ExpiresAt time.Time
	// Token, LeaseUntil and Step are lease mode's: the fencing token, when
	// the lease ends (zero: none) and the last recovery point.
	Token      int64
	LeaseUntil time.Time
	Step       string
	// Now is the time the statement judged expiry and age by: the
	// arguments' Now, or the database's clock when that was zero.
	Now time.Time
}

// Expiry filters records by whether their retention has passed.
type Expiry int

const (
	// AnyExpiry: live and expired records alike.
	AnyExpiry Expiry = iota
	// LiveOnly: records whose retention has not passed.
	LiveOnly
	// ExpiredOnly: records whose retention has passed (Purge deletes
	// them).
	ExpiredOnly
)

// ListArgs are the filters and the page of a listing. A zero field does not
// filter.
type ListArgs struct {
	// ScopePrefix keeps records whose scope starts with it, byte for byte.
	ScopePrefix string
	// States keeps records in one of these states; empty keeps all.
	States []State
	// MinAge keeps records claimed at least this long before Now; MaxAge
	// those claimed at most this long before Now.
	MinAge, MaxAge time.Duration
	// Expiry keeps live records, expired ones, or both.
	Expiry Expiry
	// AfterScope and AfterKey, when AfterSet, start the page after that
	// record in (scope, key) order.
	AfterScope, AfterKey string
	AfterSet             bool
	// Limit is the most records returned (the core always sets it).
	Limit int
	// Now is the store's clock; the zero time means the database's clock.
	Now time.Time
}

// DeleteArgs name the record to delete.
type DeleteArgs struct {
	// Scope and Key identify the record.
	Scope, Key string
	// Force deletes a live pending record too.
	Force bool
	// Now is the store's clock; the zero time means the database's clock.
	Now time.Time
}

// CountArgs narrow a count.
type CountArgs struct {
	// ScopePrefix counts records whose scope starts with it; "" counts all.
	ScopePrefix string
	// Now is the store's clock; the zero time means the database's clock.
	Now time.Time
}

// StateCount is the number of records in one state, live or expired.
type StateCount struct {
	State   State
	Expired bool
	Count   int64
}

// ScopeRange turns a scope prefix into a range of scopes, so that a prefix
// filter is two comparisons an index can serve, on every database, without
// LIKE and its escapes: a scope s has the prefix exactly when
// lo <= s (and s < hi, when bounded). hi is the prefix with its last
// character replaced by the next one, dropping trailing characters that
// have none; it stays valid UTF-8 (PostgreSQL refuses anything else), and
// UTF-8's byte order is code point order, so the range holds exactly the
// valid UTF-8 scopes with the prefix. An empty prefix gives an empty lo and
// bounded false: every scope.
func ScopeRange(prefix string) (lo, hi string, bounded bool) {
	p := prefix
	for p != "" {
		r, size := utf8.DecodeLastRuneInString(p)
		p = p[:len(p)-size]
		next := r + 1
		if next == 0xD800 { // skip the surrogates, which UTF-8 cannot hold
			next = 0xE000
		}
		if r == utf8.RuneError && size <= 1 {
			// Not UTF-8 (the core refuses such scopes): bound it by bytes.
			if b := prefix[len(p)]; b < 0xFF {
				return prefix, p + string([]byte{b + 1}), true
			}
			continue
		}
		if next <= utf8.MaxRune {
			return prefix, p + string(next), true
		}
	}
	return prefix, "", false
}
