package idem

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/idemkit/idem/dialect"
)

// The operator's view of a store: one key's record whatever its state, a
// listing by scope, state and age a page at a time, deleting a key, and
// counts by state. They run outside any transaction, on the driver's pool,
// and need a Dialect that implements dialect.Admin (every backend in this
// module does); with another they fail with errors.ErrUnsupported.

// State is where a record is in the lifecycle (dialect.State): its String
// names it ("pending", "completed") and ParseState reads a name back.
type State = dialect.State

// The states of a record.
const (
	// StatePending: claimed, no response stored yet.
	StatePending = dialect.Pending
	// StateCompleted: the response is stored and replays.
	StateCompleted = dialect.Completed
)

// ParseState returns the state with the given name ("pending",
// "completed"); an unknown name is an error wrapping ErrInvalidConfig.
func ParseState(name string) (State, error) { return dialect.ParseState(name) }

// Expiry filters a listing by whether records' retention has passed.
type Expiry = dialect.Expiry

// The Expiry filters.
const (
	// AnyExpiry lists live and expired records.
	AnyExpiry = dialect.AnyExpiry
	// LiveOnly lists records whose retention has not passed.
	LiveOnly = dialect.LiveOnly
	// ExpiredOnly lists records awaiting Purge.
	ExpiredOnly = dialect.ExpiredOnly
)

// Listing limits.
const (
	// DefaultListLimit is the page size of List when ListFilter.Limit is 0.
	DefaultListLimit = 100
	// MaxListLimit is the largest page List returns.
	MaxListLimit = 1000
)

// ErrRecordInFlight means Delete found the key's record pending and live, so a
// request may still be working on it. The error is an *InFlightRecordError.
// Wait for it to complete or expire, or use ForceDelete.
var ErrRecordInFlight = errors.New("idem: record is in flight")

// InFlightRecordError is returned by Delete for a record it refused to
// delete because it is pending and live. It matches ErrRecordInFlight.
type InFlightRecordError struct {
	// Record is the record as Delete found it.
	Record RecordInfo
}

// Error names the key and when it expires.
func (e *InFlightRecordError) Error() string {
	return fmt.Sprintf("idem: key %q in scope %q is %v until %s (claimed %s ago); ForceDelete deletes it anyway",
		e.Record.Key, e.Record.Scope, e.Record.State, e.Record.ExpiresAt.Format(time.RFC3339), e.Record.Age.Round(time.Millisecond))
}

// Unwrap returns ErrRecordInFlight.
func (e *InFlightRecordError) Unwrap() error { return ErrRecordInFlight }

// RecordInfo is what an operator sees of a record: its identity, state,
// times and the sizes of its stored response, never the response itself.
type RecordInfo struct {
	// Scope and Key identify the record.
	Scope, Key string
	// State is where the record is in the lifecycle.
	State State
	// Fingerprint is the hash of the request that claimed the key.
	Fingerprint Fingerprint
	// Status is the stored response's status (0 while pending).
	Status int
	// HeaderBytes and BodyBytes are the sizes of the stored header (idem's
	// encoding) and body.
	HeaderBytes, BodyBytes int64
	// CreatedAt is the claim time, ExpiresAt when the key may be claimed
	// afresh.
	CreatedAt, ExpiresAt time.Time
	// Age is how long ago the key was claimed, by the store's clock (the
	// database's, unless Config.Clock is set).
	Age time.Duration
	// Expired: the retention has passed; Purge deletes the record and the
	// next claim of the key takes it over.
	Expired bool
	// Token, LeaseUntil and Step are lease mode's: the fencing token, when
	// the lease ends (zero: the record holds none) and the last recovery
	// point. LeaseExpired: a pending record's lease has ended and nobody is
	// working on it: the next claim, or Store.Resume, takes it over.
	Token        int64
	LeaseUntil   time.Time
	LeaseExpired bool
	Step         string
}

func toRecordInfo(r dialect.RecordInfo) (RecordInfo, error) {
	info := RecordInfo{
		Scope:       r.Scope,
		Key:         r.Key,
		State:       r.State,
		Status:      r.Status,
		HeaderBytes: r.HeaderBytes,
		BodyBytes:   r.BodyBytes,
		CreatedAt:   r.CreatedAt,
		ExpiresAt:   r.ExpiresAt,
		Age:         r.Now.Sub(r.CreatedAt),
		Expired:     !r.ExpiresAt.After(r.Now),

		Token:        r.Token,
		LeaseUntil:   r.LeaseUntil,
		LeaseExpired: r.State == dialect.Pending && !r.LeaseUntil.IsZero() && !r.LeaseUntil.After(r.Now),
		Step:         r.Step,
	}
	if len(r.Fingerprint) != len(info.Fingerprint) {
		return RecordInfo{}, fmt.Errorf("idem: key %q in scope %q: stored fingerprint has %d bytes, want %d", r.Key, r.Scope, len(r.Fingerprint), len(info.Fingerprint))
	}
	copy(info.Fingerprint[:], r.Fingerprint)
	return info, nil
}

// admin returns the dialect's admin statements, or an error wrapping
// errors.ErrUnsupported.
func (c *core) admin(op string) (dialect.Admin, error) {
	a, ok := c.d.(dialect.Admin)
	if !ok {
		return nil, fmt.Errorf("idem: %s on %s: %w: the dialect does not implement dialect.Admin", op, c.d.Name(), errors.ErrUnsupported)
	}
	return a, nil
}

// Inspect reads the record of a key whatever its state, live or expired
// (Lookup sees only live ones). It returns ErrNotFound when the table has
// no row for the key.
func (s *Store[TTx]) Inspect(ctx context.Context, scope, key string) (RecordInfo, error) {
	req := Request{Scope: scope, Key: key}
	if err := req.Validate(); err != nil {
		return RecordInfo{}, err
	}
	a, err := s.admin("inspect")
	if err != nil {
		return RecordInfo{}, err
	}
	rec, found, err := a.Inspect(ctx, s.driver.Pool(), s.table, dialect.LookupArgs{Scope: scope, Key: key, Now: s.now()})
	if err != nil {
		return RecordInfo{}, s.failed(ctx, "inspect", req, s.d.Classify(err))
	}
	if !found {
		return RecordInfo{}, fmt.Errorf("%w: no record of key %q in scope %q", ErrNotFound, key, scope)
	}
	return toRecordInfo(rec)
}

// noLiveRecord is the ErrNotFound of a read that sees live records only
// (Lookup, Resume). It says whether the key has no record or one whose
// retention passed, asking q when the dialect can tell (dialect.Admin);
// otherwise it says that there is no live record.
func (c *core) noLiveRecord(ctx context.Context, q dialect.Queryer, req Request) error {
	if a, ok := c.d.(dialect.Admin); ok {
		rec, found, err := a.Inspect(ctx, q, c.table, dialect.LookupArgs{Scope: req.Scope, Key: req.Key, Now: c.now()})
		switch {
		case err == nil && !found:
			return fmt.Errorf("%w: no record of key %q in scope %q", ErrNotFound, req.Key, req.Scope)
		case err == nil && !rec.ExpiresAt.After(rec.Now):
			return fmt.Errorf("%w: the record of key %q in scope %q expired at %s (Purge deletes it)",
				ErrNotFound, req.Key, req.Scope, rec.ExpiresAt.UTC().Format(time.RFC3339))
		}
	}
	return fmt.Errorf("%w: no live record of key %q in scope %q", ErrNotFound, req.Key, req.Scope)
}

// Cursor is a position in a listing: the (scope, key) of the last record
// of a page. Its Token travels through command lines and URLs.
type Cursor struct {
	Scope, Key string
}

// Token encodes the cursor as URL-safe text; ParseCursor reads it back.
func (c Cursor) Token() string {
	return base64.RawURLEncoding.EncodeToString([]byte(c.Scope + "\n" + c.Key))
}

// ParseCursor reads a Cursor.Token. A malformed token is an error wrapping
// ErrInvalidConfig.
func ParseCursor(token string) (Cursor, error) {
	b, err := base64.RawURLEncoding.DecodeString(token)
	if err != nil {
		return Cursor{}, fmt.Errorf("%w: cursor %q: %w", ErrInvalidConfig, token, err)
	}
	scope, key, ok := strings.Cut(string(b), "\n")
	if !ok {
		return Cursor{}, fmt.Errorf("%w: cursor %q is not a listing position", ErrInvalidConfig, token)
	}
	return Cursor{Scope: scope, Key: key}, nil
}

// ListFilter selects records for List. Every zero field selects all.
type ListFilter struct {
	// ScopePrefix keeps records whose scope starts with it, byte for byte
	// (a tenant's records, when scopes start with the tenant).
	ScopePrefix string
	// States keeps records in these states.
	States []State
	// MinAge keeps records claimed at least this long ago ("stuck"
	// pending keys: StatePending with a MinAge); MaxAge those claimed at
	// most this long ago.
	MinAge, MaxAge time.Duration
	// Expiry keeps live records, expired ones, or both (AnyExpiry).
	Expiry Expiry
	// After starts the listing after this position (Page.Next of the
	// previous page).
	After *Cursor
	// Limit is the page size: DefaultListLimit when 0, at most
	// MaxListLimit.
	Limit int
}

// Page is one page of a listing.
type Page struct {
	// Records are in (scope, key) order, byte by byte.
	Records []RecordInfo
	// Next is where the next page starts; nil on the last page.
	Next *Cursor
}

// List returns a page of the records that match f, in (scope, key) order.
// Pages are keyset-paged: pass Page.Next as the next call's ListFilter.After;
// every page costs about the same however deep it is, and records added or
// deleted between pages neither repeat nor shift the rest.
func (s *Store[TTx]) List(ctx context.Context, f ListFilter) (Page, error) {
	switch {
	case f.Limit < 0 || f.Limit > MaxListLimit:
		return Page{}, fmt.Errorf("%w: list limit %d is outside 0..%d", ErrInvalidConfig, f.Limit, MaxListLimit)
	case f.MinAge < 0 || f.MaxAge < 0:
		return Page{}, fmt.Errorf("%w: negative age in list filter", ErrInvalidConfig)
	case f.Expiry < AnyExpiry || f.Expiry > ExpiredOnly:
		return Page{}, fmt.Errorf("%w: list expiry filter %d", ErrInvalidConfig, f.Expiry)
	}
	limit := f.Limit
	if limit == 0 {
		limit = DefaultListLimit
	}
	a, err := s.admin("list")
	if err != nil {
		return Page{}, err
	}
	args := dialect.ListArgs{
		ScopePrefix: f.ScopePrefix,
		States:      f.States,
		MinAge:      f.MinAge,
		MaxAge:      f.MaxAge,
		Expiry:      f.Expiry,
		Limit:       limit + 1, // one more tells whether there is a next page
		Now:         s.now(),
	}
	if f.After != nil {
		args.AfterScope, args.AfterKey, args.AfterSet = f.After.Scope, f.After.Key, true
	}
	recs, err := a.List(ctx, s.driver.Pool(), s.table, args)
	if err != nil {
		err = s.d.Classify(err)
		if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
			err = fmt.Errorf("%w: %w", cerr, err)
		}
		return Page{}, fmt.Errorf("idem: list %s on %s: %w", s.table.Name(), s.d.Name(), err)
	}
	var p Page
	for i, r := range recs {
		if i == limit {
			last := p.Records[limit-1]
			p.Next = &Cursor{Scope: last.Scope, Key: last.Key}
			break
		}
		info, err := toRecordInfo(r)
		if err != nil {
			return Page{}, err
		}
		p.Records = append(p.Records, info)
	}
	return p, nil
}

// Delete deletes the record of a key so that its next request does the
// work again: use it for a key whose stored answer must not be replayed.
// It refuses, with an *InFlightRecordError (ErrRecordInFlight), a record
// that is pending and live, because a request may still be working on it;
// completed and expired records are deleted. It returns ErrNotFound when
// there is no record.
func (s *Store[TTx]) Delete(ctx context.Context, scope, key string) error {
	return s.delete(ctx, scope, key, false)
}

// ForceDelete deletes the record of a key whatever its state, for a pending
// record whose request is known to be gone (a claim committed without its
// response, say). If that request is in fact still running, its completion
// fails and rolls back, and a retry does the work: with ErrNotClaimed in
// Do and Store.Claim; with ErrLeaseLost in lease mode, even once the key
// was claimed afresh (a key's lease tokens never repeat, and a record
// claimed in one transaction takes no lease holder's writes). It returns
// ErrNotFound when there is no record.
func (s *Store[TTx]) ForceDelete(ctx context.Context, scope, key string) error {
	return s.delete(ctx, scope, key, true)
}

func (s *Store[TTx]) delete(ctx context.Context, scope, key string, force bool) error {
	req := Request{Scope: scope, Key: key}
	if err := req.Validate(); err != nil {
		return err
	}
	a, err := s.admin("delete")
	if err != nil {
		return err
	}
	// The guard is in the DELETE itself; when it deletes nothing, a read
	// tells why. A record that changed in between (completed, expired) is
	// tried again, a few times.
	for range 3 {
		var n int64
		err := s.retry(ctx, req, func() error {
			return s.tx(ctx, req, false, s.cfg.WaitBound, func(q dialect.Queryer) error {
				var err error
				n, err = a.Delete(ctx, q, s.table, dialect.DeleteArgs{Scope: scope, Key: key, Force: force, Now: s.now()})
				return err
			})
		})
		if err != nil {
			return s.failed(ctx, "delete", req, err)
		}
		if n > 0 {
			return nil
		}
		info, err := s.Inspect(ctx, scope, key)
		if err != nil {
			return err // ErrNotFound when there was nothing to delete
		}
		if !force && info.State != StateCompleted && !info.Expired {
			return &InFlightRecordError{Record: info}
		}
	}
	return s.failed(ctx, "delete", req, errors.New("the record kept changing; try again"))
}

// Counts are the numbers of records by state.
type Counts struct {
	// Live counts the records whose retention has not passed, by state.
	Live map[State]int64
	// Expired counts the records awaiting Purge, whatever their state.
	Expired int64
}

// Total is the number of rows in the table that was counted.
func (c Counts) Total() int64 {
	n := c.Expired
	for _, v := range c.Live {
		n += v
	}
	return n
}

// Counts counts the records whose scope starts with scopePrefix ("": all)
// by state, and the expired ones. It reads the whole range: on a large
// table it is a scan, not something to call per request.
func (s *Store[TTx]) Counts(ctx context.Context, scopePrefix string) (Counts, error) {
	a, err := s.admin("count")
	if err != nil {
		return Counts{}, err
	}
	rows, err := a.Count(ctx, s.driver.Pool(), s.table, dialect.CountArgs{ScopePrefix: scopePrefix, Now: s.now()})
	if err != nil {
		return Counts{}, fmt.Errorf("idem: count %s on %s: %w", s.table.Name(), s.d.Name(), s.d.Classify(err))
	}
	c := Counts{Live: map[State]int64{}}
	for _, st := range dialect.States() {
		c.Live[st] = 0
	}
	for _, r := range rows {
		if r.Expired {
			c.Expired += r.Count
		} else {
			c.Live[r.State] += r.Count
		}
	}
	return c, nil
}
