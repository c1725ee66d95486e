package idem

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"reflect"
	"time"

	"github.com/idemkit/idem/dialect"
)

// Defaults for Config's zero fields.
const (
	// DefaultTable is the table records live in.
	DefaultTable = "idempotency_keys"
	// DefaultRetention is how long a record is kept: a retry after this
	// window does the work a second time. It is part of the API contract;
	// document the value you choose to your clients.
	DefaultRetention = 24 * time.Hour
	// DefaultWaitBound is how long a claim waits for another transaction
	// holding the same key before reporting InFlight.
	DefaultWaitBound = 5 * time.Second
	// DefaultMaxBody is the largest response body stored (1 MiB).
	DefaultMaxBody = 1 << 20
	// DefaultMaxAttempts is how many times Do runs a transaction that keeps
	// failing with retryable errors.
	DefaultMaxAttempts = 5
	// DefaultPurgeBatch is how many expired records one purge batch deletes.
	DefaultPurgeBatch = 1000
	// DefaultPurgeDutyCycle is the share of time Purge spends deleting: it
	// pauses three times as long as each batch took, so claims running
	// beside it keep their latency.
	DefaultPurgeDutyCycle = 0.25
	// DefaultCommitTimeout bounds the completion and COMMIT of a transaction
	// whose function has returned, once the caller's context no longer can.
	DefaultCommitTimeout = 10 * time.Second
	// DefaultLease is how long a lease (lease mode) lasts without being
	// extended or used: after it a retry takes the work over.
	DefaultLease = 30 * time.Second
)

// Config tunes a Store. The zero value of every field means its default.
type Config struct {
	// Table is the table name: ASCII letters, digits and '_', not starting
	// with a digit, at most dialect.MaxIdentifier characters.
	Table string
	// Retention is how long a record lives at least: from its claim while
	// it is in flight, and from its completion once completed, so a winner
	// slower than the retention is never overtaken by a retry that waited
	// for it. A claim of an expired key takes it over: the work is done
	// again. It must be longer than WaitBound. A record of Do or Claim may
	// live up to ExpiryGrace(Retention) longer (see ExpiryGrace).
	Retention time.Duration
	// WaitBound is how long a claim may wait for a transaction holding the
	// same key (on SQLite: holding the database) before it reports InFlight.
	WaitBound time.Duration
	// MaxBody is the largest response body stored; a larger one makes
	// Complete fail with ErrTooLarge.
	MaxBody int
	// Clock, when set, decides claim times and expiry for this store. When
	// nil, the database's clock decides, so application servers with skewed
	// clocks still agree.
	Clock func() time.Time
	// MaxAttempts bounds how many times Do runs a transaction that fails
	// with a retryable error (serialization failure, deadlock).
	MaxAttempts int
	// StoreStatus reports whether Do stores and commits a response with the
	// given status. A response it refuses is returned to the caller but its
	// transaction is rolled back, so a retry does the work again. Default:
	// DefaultStoreStatus (everything but 5xx, 400, 408, 422, 425 and 429).
	StoreStatus func(status int) bool
	// CommitTimeout bounds Complete and COMMIT once the function has
	// returned. From then on the caller's context no longer ends the
	// transaction (a client that hangs up must not turn a healthy commit
	// into one whose outcome is unknown); this bound does. Default:
	// DefaultCommitTimeout.
	CommitTimeout time.Duration
	// PurgeBatch is how many expired records one purge transaction deletes.
	PurgeBatch int
	// ReadFirst says when Do reads the key's record before it begins a
	// transaction, and answers a completed record (Replay) or one with
	// another fingerprint (Mismatch) from that read: no transaction, no
	// claim, no wait. A retry gets cheaper (on PostgreSQL one statement
	// instead of three or four) and a request that goes on to claim pays
	// one more statement and round trip. The default, ReadFirstAuto, reads
	// first while recent requests were mostly retries. A key that is new,
	// expired or in flight is still decided by the claim; Store.Claim does
	// not read first.
	ReadFirst ReadFirstPolicy
	// PurgeDutyCycle is the share of wall time Purge spends in batches,
	// above 0 and at most 1: after each batch it pauses for the batch's
	// duration times (1-d)/d. 1 runs batches back to back (fastest, but on a
	// busy database it raises claim latency).
	PurgeDutyCycle float64
	// Lease is how long a lease lasts in lease mode (Store.Lease,
	// Store.DoLease) from its claim or its last extension or recorded step:
	// past it, a retry takes the work over with a new fencing token. It
	// must be shorter than Retention and at least twice WaitBound (a claim
	// that waited out WaitBound still holds most of its lease). Default:
	// DefaultLease, or half the retention when that is shorter, and at
	// least twice WaitBound; when no such lease is shorter than Retention,
	// lease mode refuses to run (ErrInvalidConfig) and the rest of the
	// store works.
	Lease time.Duration
	// HolderWaitBound is how long a lease holder's own writes (Extend,
	// RecordStep, Complete, Release, and DoLease's heartbeat) may wait for
	// the database before failing: on SQLite, for its write lock. It is
	// apart from WaitBound, which bounds a claim's wait for a key's holder,
	// so a short WaitBound does not make a busy holder fail and a long one
	// does not let a heartbeat outwait its own lease. At most a fifth of
	// Lease, so that a heartbeat that waited it out can try again before
	// the lease ends. Default: a fifth of Lease.
	HolderWaitBound time.Duration
	// Observer, when set, receives an Event for each claim decided, retry,
	// commit of unknown outcome, stored response and purge, and (as a
	// DoObserver) sees each call of Do start and end: the hook for metrics
	// and traces (see package idemotel). Nil costs nothing.
	Observer Observer
	// Logger, when set, logs what an operator acts on: a key reused with
	// a different request (warn), a commit of unknown outcome (error), a
	// purge's summary (info). Events below the handler's level cost no
	// allocation. Nil logs nothing.
	Logger *slog.Logger
}

// DefaultStoreStatus is the Config.StoreStatus used when none is set. It
// stores every status except those that are not an outcome: the ones that
// say "not now" (5xx: the server failed; 408 Request Timeout, 425 Too Early
// and 429 Too Many Requests), after which a retry does the work, and the
// ones that say "never began" (400 Bad Request and 422 Unprocessable
// Content: the request failed validation), after which the client may
// correct the request and send it again with the same key, as Stripe's
// rule has it (a result is saved only once the endpoint began executing).
// In Do, not storing is always safe: the transaction rolls back, so
// nothing the function wrote commits, and a retry validates again. Other
// client errors (404, 409, ...) answer about the state the request met and
// are stored; a function that answers one of them before it began returns
// ErrNotAnOutcome with it. NoStatus (work without an HTTP status, done) is
// stored. In lease mode (DoLease, Lease.Complete) a status it refuses,
// 400 and 422 included, releases the lease instead: the key stays with
// this request, so a corrected one is a Mismatch; a lease's function frees
// the key with ErrNotAnOutcome (Lease.Forget) before it records a step.
func DefaultStoreStatus(status int) bool {
	switch {
	case status >= 500:
		return false
	case status == 408, status == 425, status == 429:
		return false
	case status == 400, status == 422:
		return false
	}
	return true
}

// ExpiryGrace is how far beyond retention a claim sets its record's expiry:
// a tenth of it, at most a minute. A completion within the grace leaves the
// expiry where the claim put it, which still keeps the record the whole
// retention after its completion, so the completion changes no indexed
// column: PostgreSQL keeps the update HOT, InnoDB leaves the expiry index
// alone, SQLite does not rewrite it. Only work that runs past the grace
// moves the expiry to its completion plus the retention. A completed record
// therefore lives at least the retention and at most the retention plus
// the grace; Store.Purge deletes it after that.
func ExpiryGrace(retention time.Duration) time.Duration {
	return max(min(retention/10, time.Minute), 0)
}

// claimRetention is the retention a claim sets: retention plus its grace,
// saturated, so that a retention near the largest Duration ("keep for
// ever") does not wrap into an expiry in the past.
func claimRetention(retention time.Duration) time.Duration {
	return retention + min(ExpiryGrace(retention), math.MaxInt64-retention)
}

// leaseFits checks Lease against Retention and WaitBound. Store.New
// refuses a Lease that fails it; a default Lease that fails it (a short
// Retention) only makes lease mode refuse to run.
func (c Config) leaseFits() error {
	switch {
	case c.Lease >= c.Retention:
		return fmt.Errorf("%w: Lease %v must be shorter than Retention %v", ErrInvalidConfig, c.Lease, c.Retention)
	case c.Lease < 2*c.WaitBound:
		return fmt.Errorf("%w: Lease %v must be at least twice WaitBound %v (a lease claim may wait that long, and its lease runs from before the wait)",
			ErrInvalidConfig, c.Lease, c.WaitBound)
	}
	return nil
}

func (c Config) withDefaults() (Config, error) {
	if c.Table == "" {
		c.Table = DefaultTable
	}
	for _, f := range []struct {
		name string
		v    *time.Duration
		def  time.Duration
	}{{"Retention", &c.Retention, DefaultRetention}, {"WaitBound", &c.WaitBound, DefaultWaitBound}, {"CommitTimeout", &c.CommitTimeout, DefaultCommitTimeout}, {"Lease", &c.Lease, 0}, {"HolderWaitBound", &c.HolderWaitBound, 0}} {
		if *f.v < 0 {
			return c, fmt.Errorf("%w: %s %v is negative", ErrInvalidConfig, f.name, *f.v)
		}
		if *f.v == 0 {
			*f.v = f.def
		}
	}
	for _, f := range []struct {
		name string
		v    *int
		def  int
	}{{"MaxBody", &c.MaxBody, DefaultMaxBody}, {"MaxAttempts", &c.MaxAttempts, DefaultMaxAttempts}, {"PurgeBatch", &c.PurgeBatch, DefaultPurgeBatch}} {
		if *f.v < 0 {
			return c, fmt.Errorf("%w: %s %d is negative", ErrInvalidConfig, f.name, *f.v)
		}
		if *f.v == 0 {
			*f.v = f.def
		}
	}
	if c.Retention <= c.WaitBound {
		// A retry that waited the whole bound for the winner must still
		// find the winner's record when it gets to read it.
		return c, fmt.Errorf("%w: Retention %v must be longer than WaitBound %v", ErrInvalidConfig, c.Retention, c.WaitBound)
	}
	if c.Lease != 0 {
		if err := c.leaseFits(); err != nil {
			return c, err
		}
	} else {
		c.Lease = max(min(DefaultLease, c.Retention/2), 2*c.WaitBound)
	}
	if c.HolderWaitBound == 0 {
		c.HolderWaitBound = c.Lease / 5
	} else if c.HolderWaitBound > c.Lease/5 {
		return c, fmt.Errorf("%w: HolderWaitBound %v must be at most a fifth of Lease %v (a heartbeat every third of the lease must be able to wait it out twice)",
			ErrInvalidConfig, c.HolderWaitBound, c.Lease)
	}
	if c.ReadFirst < ReadFirstAuto || c.ReadFirst > ReadFirstNever {
		return c, fmt.Errorf("%w: ReadFirst %v is not a policy", ErrInvalidConfig, c.ReadFirst)
	}
	if c.StoreStatus == nil {
		c.StoreStatus = DefaultStoreStatus
	}
	switch {
	case c.PurgeDutyCycle < 0 || c.PurgeDutyCycle > 1:
		return c, fmt.Errorf("%w: PurgeDutyCycle %v is outside (0, 1]", ErrInvalidConfig, c.PurgeDutyCycle)
	case c.PurgeDutyCycle == 0:
		c.PurgeDutyCycle = DefaultPurgeDutyCycle
	}
	return c, nil
}

// Store runs the idempotency lifecycle on one backend. TTx is the backend's
// native transaction type (*sql.Tx, pgx.Tx). A Store holds no state besides
// its configuration and is safe for concurrent use. One store serves every
// isolation level (see Isolation) and every table use of one database.
type Store[TTx any] struct {
	core
	driver dialect.Driver[TTx]
}

// core is the part of a Store that does not depend on the transaction type.
type core struct {
	d     dialect.Dialect
	table dialect.Table
	cfg   Config
	// pool runs statements outside any transaction (the driver's Pool).
	pool dialect.Queryer
	// doObserver is cfg.Observer when it is a DoObserver.
	doObserver DoObserver
	// settled tracks how many recent claims found a settled record, for
	// ReadFirstAuto.
	settled *settledShare
	// leaseErr, when set, is why lease mode cannot run with this Config
	// (a default Lease that does not fit a short Retention).
	leaseErr error
}

// New returns a Store running on driver. It fails with ErrInvalidConfig for a
// bad Config, including a table name that is not an identifier.
func New[TTx any](driver dialect.Driver[TTx], cfg Config) (*Store[TTx], error) {
	if isNil(driver) {
		// A nil *Driver in the interface is what `d, _ := sqlite.New(...)`
		// leaves when the constructor failed: its methods would panic.
		return nil, fmt.Errorf("%w: nil driver %T (did its constructor fail?)", ErrInvalidConfig, driver)
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	table, err := dialect.NewTable(cfg.Table)
	if err != nil {
		return nil, fmt.Errorf("%w: table: %w", ErrInvalidConfig, err)
	}
	s := &Store[TTx]{core: core{d: driver.Dialect(), table: table, cfg: cfg, pool: driver.Pool(), settled: &settledShare{}}, driver: driver}
	s.doObserver, _ = cfg.Observer.(DoObserver)
	s.leaseErr = cfg.leaseFits()
	return s, nil
}

// isNil reports whether v is nil or holds a nil pointer, map, slice,
// channel or function.
func isNil(v any) bool {
	if v == nil {
		return true
	}
	switch rv := reflect.ValueOf(v); rv.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Chan, reflect.Func, reflect.Interface:
		return rv.IsNil()
	}
	return false
}

// Config returns the store's configuration with defaults filled in.
func (s *Store[TTx]) Config() Config { return s.cfg }

// Outcome says what a claim (or Do) found.
type Outcome int

const (
	// Won: this transaction owns the work. Do ran the function.
	Won Outcome = iota + 1
	// Replay: the key's work is done; Response is the stored outcome, to be
	// returned byte for byte (HTTP: with the replay header).
	Replay
	// Mismatch: the key was used with a different fingerprint. No work was
	// done; HTTP answers 422.
	Mismatch
	// InFlight: another transaction holds the key and did not finish within
	// the wait bound, or committed its claim without completing. No work was
	// done; HTTP answers 409 with Retry-After.
	InFlight
)

// String returns "won", "replay", "mismatch" or "in-flight", and "none"
// for the zero Outcome (a Result nothing filled in, as returned with an
// error).
func (o Outcome) String() string {
	switch o {
	case 0:
		return "none"
	case Won:
		return "won"
	case Replay:
		return "replay"
	case Mismatch:
		return "mismatch"
	case InFlight:
		return "in-flight"
	}
	return fmt.Sprintf("Outcome(%d)", int(o))
}

// Record is a stored idempotency record.
type Record struct {
	// Scope and Key identify the record.
	Scope, Key string
	// Fingerprint is the hash of the request that claimed the key.
	Fingerprint Fingerprint
	// Completed is true once the winner stored its response.
	Completed bool
	// Response is the stored response when Completed.
	Response Response
	// CreatedAt is when the key was claimed. ExpiresAt is when the key can
	// be claimed afresh: the retention after the claim while in flight,
	// after the completion once completed (and never before a lease ends);
	// for a record of Do or Claim, the retention and ExpiryGrace after the
	// claim unless the work ran past the grace.
	CreatedAt, ExpiresAt time.Time
	// Token is the lease's fencing token (lease mode): 1 for a fresh lease,
	// one more on every takeover; 0 for a record claimed in one transaction.
	Token int64
	// LeaseUntil is when a pending record's lease ends; zero when it holds
	// none. LeaseExpired says it has ended, by the store's clock.
	LeaseUntil   time.Time
	LeaseExpired bool
	// Step and StepData are the last recovery point a lease holder
	// recorded; "" when none.
	Step     string
	StepData []byte
}

// Result is what a claim found, or what Do did.
type Result struct {
	// Outcome says who owns the key and what the caller should answer.
	Outcome Outcome
	// Response is the stored response on Replay; from Do on Won, the
	// function's response.
	Response Response
	// Committed is set by Do: the function's work and the record committed.
	// It is false on Won when the response's status was not to be stored
	// and its transaction rolled back (see Config.StoreStatus), when the
	// function returned ErrNotAnOutcome with it, or when it could not be
	// stored (NotStored), and for every other outcome.
	Committed bool
	// NotStored, on Won from Do or from a lease's Complete, is why the
	// function's response could not be stored: a statement of its
	// transaction failed before it answered, and the database aborted the
	// transaction (it matches ErrTxAborted). The answer, a client error
	// (4xx), is the function's own; its work was rolled back and a retry
	// with the key does it again. Log it: to store such answers, keep the
	// transaction usable (a savepoint around the statement that may fail,
	// or INSERT ... ON CONFLICT DO NOTHING). It is nil when the status was
	// not to be stored (Config.StoreStatus) and when Committed.
	NotStored error
	// Record is the record a loser found: zero on an InFlight whose wait
	// ran out while no committed record held the key (another
	// transaction's claim was not committed yet, or Busy), and on Won from
	// Do or Claim; a won Lease holds its own record.
	Record Record
	// Busy is set with InFlight when the wait that ran out was for the
	// database itself, not for this key: on a backend whose writers take
	// the whole database (Capabilities.DatabaseWriteLock, SQLite), another
	// transaction held it past Config.WaitBound and no committed record
	// holds the key. The key may be free: retry soon, and do not report it
	// as being processed elsewhere.
	Busy bool
}

// Claimed is what Store.Claim returns: a won claim to complete, or what a
// loser found.
type Claimed struct {
	Result
	core      *core
	q         dialect.Queryer
	req       Request
	completed bool
}

// Claim claims req's key in the caller's transaction tx with one insert that
// tells the winner from the loser. On Won the caller performs its effect in
// tx, calls Complete, then commits; to answer without storing (the request
// failed validation: not an outcome, see ErrNotAnOutcome), it rolls tx
// back instead of calling Complete, which drops the claim with everything
// tx wrote, so the key is free for a corrected request. Any other outcome means the caller does
// no work and should roll tx back; on some databases (PostgreSQL) a claim that
// timed out (InFlight) has already aborted tx.
func (s *Store[TTx]) Claim(ctx context.Context, tx TTx, req Request) (*Claimed, error) {
	if err := req.Validate(); err != nil {
		return nil, err
	}
	q, err := s.driver.Wrap(tx)
	if err != nil {
		return nil, fmt.Errorf("idem: claim %q: %w", req.Key, err)
	}
	// The caller's transaction is not ours to end: a claim that waited
	// out its bound reads the key while it still holds its connection.
	return s.claim(ctx, q, req, nil)
}

// claim claims req's key in q. When the claim waits out its bound, the
// key's committed record is read outside q (waitedOut), after end has
// ended q's transaction, when end is not nil: q holds a connection of the
// pool, which may be its only one.
func (c *core) claim(ctx context.Context, q dialect.Queryer, req Request, end func()) (*Claimed, error) {
	started := c.startClock()
	res, err := c.d.Claim(ctx, q, c.table, dialect.ClaimArgs{
		Scope:       req.Scope,
		Key:         req.Key,
		Fingerprint: req.Fingerprint[:],
		Now:         c.now(),
		Retention:   claimRetention(c.cfg.Retention),
		WaitBound:   c.cfg.WaitBound,
	})
	if err != nil {
		err = c.d.Classify(err)
		if errors.Is(err, ErrLockTimeout) && ctx.Err() == nil {
			if end != nil {
				end()
			}
			res := c.waitedOut(ctx, req)
			c.claimed(ctx, req, res.Outcome, started, false)
			return &Claimed{Result: res, core: c, req: req}, nil
		}
		return nil, c.failed(ctx, "claim", req, err)
	}
	cl := &Claimed{core: c, q: q, req: req}
	if res.Won {
		cl.Outcome = Won
		c.claimed(ctx, req, Won, started, false)
		return cl, nil
	}
	cl.Result, err = c.judge(req, res.Record)
	if err == nil {
		c.claimed(ctx, req, cl.Outcome, started, false)
	}
	return cl, err
}

// waitedOut is the outcome of a claim whose wait for the key (or, on
// SQLite, for the database) ran out: what the key's committed record says,
// read outside any transaction. A completed record replays and another
// fingerprint is a mismatch, as they would once the wait ended; a pending
// one is InFlight with its record (a lease's end, for Retry-After). With no
// record the key is held by a transaction not yet committed, or, where
// writers wait for the whole database, possibly by nobody: Busy. The read
// waits at most Config.WaitBound, also for a connection of the pool: the
// caller's own transaction (Store.Claim) may hold the pool's last one.
func (c *core) waitedOut(ctx context.Context, req Request) Result {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.WaitBound)
	defer cancel()
	rec, found, err := c.d.Lookup(ctx, c.pool, c.table, dialect.LookupArgs{Scope: req.Scope, Key: req.Key, Now: c.now()})
	if err == nil && found {
		if res, err := c.judge(req, rec); err == nil {
			return res
		}
	}
	return Result{Outcome: InFlight, Busy: c.d.Capabilities().DatabaseWriteLock}
}

// failed wraps a statement's error with what was being done, marks errors
// that mean the transaction itself is unusable with ErrBadTx, and keeps an
// ended context, and its cause (ErrCommitTimeout, say), visible to
// errors.Is.
func (c *core) failed(ctx context.Context, op string, req Request, err error) error {
	if (errors.Is(err, ErrReadOnly) || errors.Is(err, ErrTxDone) || errors.Is(err, ErrTxAborted)) && !errors.Is(err, ErrBadTx) {
		err = fmt.Errorf("%w: %w", ErrBadTx, err)
	}
	if cerr := ctx.Err(); cerr != nil {
		for _, e := range []error{cerr, context.Cause(ctx)} {
			if !errors.Is(err, e) {
				err = fmt.Errorf("%w: %w", e, err)
			}
		}
	}
	return fmt.Errorf("idem: %s %q in scope %q on %s: %w", op, req.Key, req.Scope, c.d.Name(), err)
}

// judge turns the record a loser found into its outcome: a different
// fingerprint is a mismatch, a completed record replays, anything else is in
// flight.
func (c *core) judge(req Request, rec dialect.Record) (Result, error) {
	r, err := toRecord(rec)
	if err != nil {
		return Result{}, fmt.Errorf("idem: key %q in scope %q: %w", req.Key, req.Scope, err)
	}
	switch {
	case r.Fingerprint != req.Fingerprint:
		return Result{Outcome: Mismatch, Record: r}, nil
	case r.Completed:
		return Result{Outcome: Replay, Response: r.Response, Record: r}, nil
	default:
		return Result{Outcome: InFlight, Record: r}, nil
	}
}

func toRecord(rec dialect.Record) (Record, error) {
	r := Record{
		Scope:     rec.Scope,
		Key:       rec.Key,
		Completed: rec.State == dialect.Completed,
		CreatedAt: rec.CreatedAt,
		ExpiresAt: rec.ExpiresAt,

		Token:        rec.Token,
		LeaseUntil:   rec.LeaseUntil,
		LeaseExpired: rec.LeaseExpired,
		Step:         rec.Step,
		StepData:     rec.StepData,
	}
	if len(rec.Fingerprint) != len(r.Fingerprint) {
		return Record{}, fmt.Errorf("idem: stored fingerprint has %d bytes, want %d", len(rec.Fingerprint), len(r.Fingerprint))
	}
	copy(r.Fingerprint[:], rec.Fingerprint)
	if r.Completed {
		h, err := decodeHeader(rec.Header)
		if err != nil {
			return Record{}, err
		}
		body := rec.Body
		if body == nil {
			body = []byte{}
		}
		r.Response = Response{Status: rec.Status, Header: h, Body: body}
	}
	return r, nil
}

// Complete stores resp as the outcome of the won claim, as a separate
// statement in the same transaction, and marks the key completed. The caller
// commits afterwards. If Complete fails, the caller must roll back: the
// effect must not commit without its record.
func (c *Claimed) Complete(ctx context.Context, resp Response) error {
	switch {
	case c.Outcome != Won:
		return fmt.Errorf("%w: the claim was not won: outcome is %v for key %q", ErrNotClaimed, c.Outcome, c.req.Key)
	case c.completed:
		return fmt.Errorf("%w: key %q", ErrAlreadyCompleted, c.req.Key)
	}
	if err := resp.validate(); err != nil {
		return err
	}
	header, body, err := c.core.encodeResponse(resp)
	if err != nil {
		return err
	}
	err = c.core.d.Complete(ctx, c.q, c.core.table, dialect.CompleteArgs{
		Scope:       c.req.Scope,
		Key:         c.req.Key,
		Fingerprint: c.req.Fingerprint[:],
		Status:      resp.Status,
		Header:      header,
		Body:        body,
		Now:         c.core.now(),
		Retention:   c.core.cfg.Retention,
	})
	if err != nil {
		return c.core.failed(ctx, "complete", c.req, c.core.d.Classify(err))
	}
	c.completed = true
	c.Response = resp
	if c.core.observing() {
		c.core.emit(ctx, Event{Kind: EventStored, Scope: c.req.Scope, Key: c.req.Key, Status: resp.Status, HeaderBytes: len(header), BodyBytes: len(body)})
	}
	return nil
}

// encodeResponse checks resp against the store's limits and returns its
// stored form: the encoded header and a non-nil body.
func (c *core) encodeResponse(resp Response) (header, body []byte, err error) {
	if len(resp.Body) > c.cfg.MaxBody {
		return nil, nil, fmt.Errorf("idem: response body of %d bytes is over Config.MaxBody (%d): %w", len(resp.Body), c.cfg.MaxBody, ErrTooLarge)
	}
	header = encodeHeader(resp.Header)
	if len(header) > MaxHeaderBytes {
		return nil, nil, fmt.Errorf("idem: response header of %d bytes encoded is over MaxHeaderBytes (%d): %w", len(header), MaxHeaderBytes, ErrTooLarge)
	}
	body = resp.Body
	if body == nil {
		body = []byte{}
	}
	return header, body, nil
}

// Lookup reads the live record of a key outside any transaction, for status
// endpoints and operators. It returns ErrNotFound when there is none (or it
// expired).
func (s *Store[TTx]) Lookup(ctx context.Context, scope, key string) (Record, error) {
	return s.lookup(ctx, s.driver.Pool(), scope, key)
}

// LookupTx reads the live record of a key in the caller's transaction tx,
// which may be read-only (on a replica, say): it sees what tx's snapshot
// sees. It returns ErrNotFound when there is none (or it expired).
func (s *Store[TTx]) LookupTx(ctx context.Context, tx TTx, scope, key string) (Record, error) {
	q, err := s.driver.Wrap(tx)
	if err != nil {
		return Record{}, fmt.Errorf("idem: lookup %q: %w", key, err)
	}
	return s.lookup(ctx, q, scope, key)
}

func (s *Store[TTx]) lookup(ctx context.Context, q dialect.Queryer, scope, key string) (Record, error) {
	req := Request{Scope: scope, Key: key}
	if err := req.Validate(); err != nil {
		return Record{}, err
	}
	rec, found, err := s.d.Lookup(ctx, q, s.table, dialect.LookupArgs{Scope: scope, Key: key, Now: s.now()})
	if err != nil {
		return Record{}, s.failed(ctx, "lookup", req, s.d.Classify(err))
	}
	if !found {
		return Record{}, s.noLiveRecord(ctx, q, req)
	}
	return toRecord(rec)
}

// now is the store's clock, or the zero time for the database's clock.
func (c *core) now() time.Time {
	if c.cfg.Clock == nil {
		return time.Time{}
	}
	return c.cfg.Clock()
}
