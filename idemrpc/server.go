package idemrpc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/idemkit/idem"
)

// DefaultRetryAfter is the retry delay sent with Aborted and Unavailable
// answers when Config.RetryAfter is zero.
const DefaultRetryAfter = time.Second

// Config tunes a Server: the adapter's own Config, and the words its
// messages use. Zero fields mean their defaults.
type Config struct {
	// Transport names the adapter in errors and logs ("idemgrpc").
	Transport string
	// Subject is what a call calls, in messages and as the log attribute
	// that names it: "method" (the default) or "procedure".
	Subject string
	// KeyField names where the key goes, in messages: "idempotency-key
	// metadata entry" (the default) or "Idempotency-Key header".
	KeyField string

	// AllowAnonymous accepts calls whose principal is "" (they all share
	// one scope); otherwise they are refused with PermissionDenied.
	AllowAnonymous bool
	// KeyOptional lets a call without a key through untouched (reported
	// to the store's Observer as idem.EventKeyless).
	KeyOptional bool
	// RetryAfter is the delay of the RetryInfo sent with Aborted and
	// Unavailable answers. Default: DefaultRetryAfter; negative is
	// refused.
	RetryAfter time.Duration
	// Logger receives the errors behind Internal and Unavailable answers
	// and the calls refused for a missing principal. Default:
	// slog.Default().
	Logger *slog.Logger
}

// Server decides the calls of one adapter on one Store. It is safe for
// concurrent use.
type Server[TTx any] struct {
	store *idem.Store[TTx]
	cfg   Config
}

// NewServer returns a Server on store. It fails for a nil store or a
// negative RetryAfter, with an error matching idem.ErrInvalidConfig.
func NewServer[TTx any](store *idem.Store[TTx], cfg Config) (*Server[TTx], error) {
	if cfg.Transport == "" {
		cfg.Transport = "idemrpc"
	}
	if store == nil {
		return nil, fmt.Errorf("%s: %w: nil store", cfg.Transport, idem.ErrInvalidConfig)
	}
	if cfg.Subject == "" {
		cfg.Subject = "method"
	}
	if cfg.KeyField == "" {
		cfg.KeyField = MetadataKey + " metadata entry"
	}
	switch {
	case cfg.RetryAfter < 0:
		return nil, fmt.Errorf("%s: %w: RetryAfter %v is negative", cfg.Transport, idem.ErrInvalidConfig, cfg.RetryAfter)
	case cfg.RetryAfter == 0:
		cfg.RetryAfter = DefaultRetryAfter
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Server[TTx]{store: store, cfg: cfg}, nil
}

// Call is one call to a protected method, as the adapter read it.
type Call struct {
	// Method is the full method name ("/pkg.Service/Method"), for logs.
	Method string
	// Keys are the values of the key entry (MetadataKey), as received.
	Keys []string
	// Principal is who is calling, from the adapter's Config.Principal.
	Principal string
	// Scope is the key's scope, the adapter's Scope(Principal, Method).
	Scope string
	// FormerScope, when set, is the scope an earlier version built for
	// the call: a record stored under it answers (idem.Store.Answered).
	FormerScope string
	// Fingerprint hashes what the call asks for. It is called once the
	// key and the principal passed.
	Fingerprint func() (idem.Fingerprint, error)
}

// Verdict says how an adapter answers a call Serve let through.
type Verdict int

const (
	// Pass: run the handler as if the interceptor were not there: a
	// keyless call under KeyOptional, or one already inside a run of the
	// same store (an interceptor chained twice) with that run's key or
	// none, whose handler then works in the outer run's transaction.
	Pass Verdict = iota + 1
	// Ran: the handler's last run answers, as it answered, with that
	// run's header and trailer only; Served.Committed says whether it was
	// stored.
	Ran
	// Replayed: the stored answer of an earlier call answers, with its
	// header and trailer, marked replayed (MetadataReplayed: "true").
	Replayed
)

// Served is how a call is to be answered.
type Served struct {
	Verdict Verdict
	// Committed is set with Ran when the answer was stored with the
	// handler's writes. Without it the run was rolled back: the answer is
	// sent but not stored, and a retry runs the handler again.
	Committed bool
	// Aborted is the store's error, with Ran, when a statement of the
	// handler's transaction failed and aborted it (PostgreSQL), so the
	// answer could not be stored and the run was rolled back: answer as
	// Server.Aborted says.
	Aborted error
	// Stored is the stored answer, with Replayed.
	Stored idem.Response
	// Request is the call's key, scope and fingerprint, with Replayed
	// (for Unreadable) and Aborted.
	Request idem.Request
}

// unstoredError marks an answer of the handler that is not stored.
type unstoredError struct{ err error }

func (e *unstoredError) Error() string { return e.err.Error() }
func (e *unstoredError) Unwrap() error { return e.err }

// Unstored is what the run function returns for an answer of the handler
// that is not to be stored (a code the store policy refuses, a plain
// error): the run is rolled back and the call is answered Ran, with the
// handler's answer as it gave it. A retryable database error in err (a
// serialization failure) runs the handler again in a fresh transaction
// first.
func Unstored(err error) error { return &unstoredError{err: err} }

// unstorableError marks a handler answer that cannot be stored faithfully.
type unstorableError struct{ err error }

func (e *unstorableError) Error() string { return e.err.Error() }
func (e *unstorableError) Unwrap() error { return e.err }

// Unstorable is what the run function returns for an answer that could
// not be replayed as itself (a message that does not encode, or is not of
// the method's response type): the run is rolled back, err is logged, and
// the call is answered Internal.
func Unstorable(err error) error { return &unstorableError{err: err} }

// Serve decides a call to a method the adapter protects. Unless the call
// is let through (Pass) or refused (the error, an *Error), it runs run in
// the store's transaction (idem.Store.Do), each time the database asks for
// a retry in a fresh one, with the transaction in its context for Tx.
//
// run runs the handler once and returns the answer to store (Status
// idem.NoStatus, the header, the encoded Answer), or Unstored or
// Unstorable. It must keep what each run answered, header and trailer
// included, and forget an earlier run's: with Ran, only the last run's
// answer may reach the client, since the others were rolled back.
func (s *Server[TTx]) Serve(ctx context.Context, call Call, run idem.Func[TTx]) (Served, error) {
	if outer := runOf(ctx); outer != nil || s.store.InRun(ctx) {
		if outer != nil && outer.store == any(s.store) && sameKey(call.Keys, outer.key) {
			return Served{Verdict: Pass}, nil // the outer run protects it
		}
		s.cfg.Logger.LogAttrs(ctx, slog.LevelError, s.cfg.Transport+": refused a call inside another run: a server of this store runs it only inside its own server's run (installed twice), with that call's key or none; not with another key (its key would never be recorded), inside a bare Do, an HTTP middleware's run or another store's server",
			slog.String(s.cfg.Subject, call.Method))
		return Served{}, &Error{Code: Internal, Reason: ReasonNested,
			Message: "the service is misconfigured: this " + s.cfg.Subject + " is protected twice; nothing was done"}
	}
	if s.cfg.KeyOptional && len(call.Keys) == 0 {
		s.store.Keyless(ctx, call.Scope)
		return Served{Verdict: Pass}, nil
	}
	key, err := serverKey(call.Keys, s.cfg.Subject, s.cfg.KeyField)
	if err != nil {
		return Served{}, err
	}
	if call.Principal == "" && !s.cfg.AllowAnonymous {
		s.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, s.cfg.Transport+": refused a call without a principal; install the interceptor after authentication, or set Config.AllowAnonymous for "+s.cfg.Subject+"s anonymous by design",
			slog.String(s.cfg.Subject, call.Method))
		return Served{}, &Error{Code: PermissionDenied, Reason: ReasonPrincipalMissing,
			Message: "this call carries an idempotency key but no authenticated caller to scope it to; nothing was done"}
	}
	fp, err := call.Fingerprint()
	if err != nil {
		s.cfg.Logger.LogAttrs(ctx, slog.LevelError, s.cfg.Transport+": fingerprint failed", slog.String(s.cfg.Subject, call.Method), slog.Any("error", err))
		return Served{}, &Error{Code: Internal, Message: "the request could not be fingerprinted; nothing was done"}
	}
	req := idem.Request{Scope: call.Scope, Key: key, Fingerprint: fp}

	var (
		res   idem.Result
		found bool // a record under the former scope answered
	)
	if call.FormerScope != "" {
		res, found, err = s.store.Answered(ctx, call.FormerScope, key, fp)
	}
	if !found && err == nil {
		res, err = s.store.Do(ctx, req, func(ctx context.Context, tx TTx) (idem.Response, error) {
			return run(withTx(ctx, tx, s.store, key), tx)
		})
	}
	if err != nil {
		return s.failed(ctx, req, call.Method, err)
	}
	switch res.Outcome {
	case idem.Won:
		return Served{Verdict: Ran, Committed: res.Committed}, nil
	case idem.Replay:
		return Served{Verdict: Replayed, Stored: res.Response, Request: req}, nil
	case idem.Mismatch:
		return Served{}, &Error{Code: FailedPrecondition, Reason: ReasonMismatch,
			Message: "this idempotency key was already used with a different request; use a new key for a new operation"}
	case idem.InFlight:
		msg, reason := "a call with this idempotency key is still in progress; retry later with the same key", ReasonInFlight
		switch {
		case res.Busy && res.Record.Key == "":
			msg, reason = "the database was busy with other writes past the wait bound, so whether another call holds this idempotency key is not known; nothing was done; retry soon with the same key", ReasonDatabaseBusy
		case res.Record.Key == "":
			msg = "the call could not claim its idempotency key in time: another call holds it, or the database is busy; retry later with the same key"
		}
		return Served{}, s.retryLater(Aborted, msg, reason)
	}
	return s.failed(ctx, req, call.Method, fmt.Errorf("%s: unexpected outcome %v", s.cfg.Transport, res.Outcome))
}

// failed turns an error from Do into the call's answer: the handler's own
// answer when it was not to be stored, else idem's. Nothing was stored,
// or (ErrCommitUnknown) it is not known whether it was.
func (s *Server[TTx]) failed(ctx context.Context, req idem.Request, method string, err error) (Served, error) {
	log := func(msg string) {
		s.cfg.Logger.LogAttrs(ctx, slog.LevelError, s.cfg.Transport+": "+msg, slog.String(s.cfg.Subject, method),
			slog.String("scope", req.Scope), slog.String("key", req.Key), slog.Any("error", err))
	}
	var (
		unstored   *unstoredError
		unstorable *unstorableError
		ended      *idem.TxEndedError
	)
	switch {
	case errors.As(err, &unstored) && !errors.Is(err, idem.ErrRetriesExhausted):
		// Rolled back: the handler's own answer, whatever it wraps.
		return Served{Verdict: Ran}, nil
	case errors.Is(err, idem.ErrCommitUnknown):
		log("commit outcome unknown")
		return Served{}, s.retryLater(Unavailable, "the database connection was lost while committing, so it is not known whether the call took effect; retry with the same key: you will get its result, or it will be done once", ReasonCommitUnknown)
	case errors.Is(err, idem.ErrRetriesExhausted):
		log("transaction kept failing with retryable errors")
		return Served{}, s.retryLater(Aborted, "the call conflicted with concurrent ones and was rolled back; retry with the same key", ReasonStoreUnavailable)
	case errors.Is(err, idem.ErrTooLarge):
		log("response too large to store; rolled back")
		return Served{}, &Error{Code: Internal, Message: "the response was too large to store for replay, so the call was rolled back; retrying will not help"}
	case errors.As(err, &unstorable):
		log("response cannot be stored; rolled back")
		return Served{}, &Error{Code: Internal, Message: "the response could not be stored for replay, so the call was rolled back"}
	case errors.As(err, &ended):
		log("handler ended the transaction itself")
		return Served{}, &Error{Code: Internal, Message: "the call's transaction was ended before its response could be stored"}
	case errors.Is(err, idem.ErrTxAborted):
		return Served{Verdict: Ran, Aborted: err, Request: req}, nil // see Server.Aborted
	case ctx.Err() != nil:
		code := Canceled
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			code = DeadlineExceeded
		}
		return Served{}, &Error{Code: code, Message: ctx.Err().Error()}
	}
	log("store failed; nothing stored")
	return Served{}, s.retryLater(Unavailable, "the call could not be recorded and was rolled back; retry with the same key", ReasonStoreUnavailable)
}

// Aborted answers a call whose run served.Aborted: the handler's error
// answer (answeredError) is sent as it gave it, not stored, and logged as a
// warning; a success is not sent, since its work was rolled back: the call
// gets Internal, and the error is logged. Nothing was stored either way.
func (s *Server[TTx]) Aborted(ctx context.Context, method string, served Served, answeredError bool) *Error {
	level, msg := slog.LevelWarn, "a statement of the handler's transaction failed and aborted it: its answer is sent, rolled back and not stored (use a savepoint or ON CONFLICT for answers that must be stored)"
	if !answeredError {
		level, msg = slog.LevelError, "the handler answered success after a statement of its transaction failed and aborted it: rolled back, nothing stored"
	}
	s.cfg.Logger.LogAttrs(ctx, level, s.cfg.Transport+": "+msg, slog.String(s.cfg.Subject, method),
		slog.String("scope", served.Request.Scope), slog.String("key", served.Request.Key), slog.Any("error", served.Aborted))
	if answeredError {
		return nil
	}
	return &Error{Code: Internal, Message: "the call failed and was rolled back: a statement of its transaction failed; nothing was stored"}
}

// Unreadable is the answer to a call whose stored answer the adapter could
// not decode (err says why; it is logged): Internal, and the handler is
// not run again, since the call was done once already.
func (s *Server[TTx]) Unreadable(ctx context.Context, method string, served Served, err error) *Error {
	s.cfg.Logger.LogAttrs(ctx, slog.LevelError, s.cfg.Transport+": stored answer unreadable", slog.String(s.cfg.Subject, method),
		slog.String("scope", served.Request.Scope), slog.String("key", served.Request.Key), slog.Any("error", err))
	return &Error{Code: Internal, Message: "the stored answer of this call cannot be read; it was not run again"}
}

// retryLater is an answer the call may get past if retried with the same
// key after the configured delay.
func (s *Server[TTx]) retryLater(code Code, msg, reason string) *Error {
	return &Error{Code: code, Message: msg, Reason: reason, RetryAfter: s.cfg.RetryAfter}
}

// Stream decides a streaming call to a method the adapter's Protect
// selects. A key protects a unary call only (one request, one answer, one
// transaction), and a stream must never run as if it were protected: it
// is refused with Unimplemented (ReasonStreamUnsupported) and logged,
// unless KeyOptional lets a call without a key through (nil: run it
// untouched; scope is the scope it would have, for idem.EventKeyless).
func (s *Server[TTx]) Stream(ctx context.Context, method string, keys []string, scope func() string) error {
	if s.cfg.KeyOptional && len(keys) == 0 {
		if scope != nil {
			s.store.Keyless(ctx, scope())
		}
		return nil
	}
	s.cfg.Logger.LogAttrs(ctx, slog.LevelError, s.cfg.Transport+": refused a streaming call that Config.Protect selects: idempotency keys protect unary calls only; leave streams out of Protect",
		slog.String(s.cfg.Subject, method))
	return &Error{Code: Unimplemented, Reason: ReasonStreamUnsupported,
		Message: "this " + s.cfg.Subject + " is a stream, which idempotency keys cannot protect; it was refused rather than run unprotected; nothing was done"}
}

// sameKey reports whether a call inside a run, with the key metadata
// values keys, is the run's own call as far as its key goes: it carries
// the run's key, or none. One with another key is refused: passed
// through, its key would never be recorded, and a later retry of it
// would do its work again.
func sameKey(keys []string, runKey string) bool {
	return len(keys) == 0 || (len(keys) == 1 && keys[0] == runKey)
}
