package idemgrpc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/idemkit/idem"
)

// Metadata names of the protocol (gRPC metadata keys are lower case).
const (
	// MetadataKey carries the client's idempotency key.
	MetadataKey = "idempotency-key"
	// MetadataReplayed is "true" in the response header of a replayed call.
	MetadataReplayed = "idempotent-replayed"
)

// DefaultRetryAfter is the retry delay sent with Aborted and Unavailable
// answers when Config.RetryAfter is zero.
const DefaultRetryAfter = time.Second

// Config tunes a Server. Principal is required; every other zero field
// means its default.
type Config struct {
	// Principal returns who is calling: the authenticated user, client or
	// tenant, usually put in the context by an authentication interceptor
	// that runs before this one. It is part of every key's scope, so one
	// client's key can never replay another's response. A call for which
	// it returns "" is refused with PermissionDenied and logged, unless
	// AllowAnonymous is set.
	Principal func(ctx context.Context) string

	// AllowAnonymous accepts calls whose Principal is "". They all share
	// one scope: one anonymous caller can replay another's stored answer
	// (with the same key and request). Set it only for methods that are
	// anonymous by design and whose answers hold nothing private.
	AllowAnonymous bool

	// FormerScopes also answers from records stored under the scope form
	// of idem v0.0 ("grpc", the method, principal last): a retry of a call
	// first made before the upgrade gets the first attempt's answer instead
	// of being done again under the new scope (idem.Store.Answered). It
	// costs one read per protected call; turn it on for the upgrade and
	// off once one retention window has passed. The read is outside the
	// transaction: a call a v0.0 server claims during it can still be done
	// twice, so finish a rolling upgrade before clients retry across it.
	FormerScopes bool

	// KeyOptional lets a protected call without an idempotency-key entry
	// through untouched, for adopting keys gradually: the handler runs as
	// if the interceptor were not there, outside any transaction (Tx
	// reports false), and the store's Observer sees an idem.EventKeyless
	// (idemotel: idem.keyless). A call with a key is protected as usual.
	KeyOptional bool

	// Protect reports whether a method (its full name, "/pkg.Service/Method")
	// requires a key and runs in a transaction. Other methods pass through
	// untouched. Default: DefaultProtect, every method the interceptor is
	// installed on but gRPC's health and reflection services.
	Protect func(fullMethod string) bool

	// Fingerprint hashes what the call asks for; the same key with another
	// fingerprint is refused (FailedPrecondition). Default:
	// DefaultFingerprint (the method and the request message's
	// deterministic protobuf encoding).
	Fingerprint func(fullMethod string, req any) (idem.Fingerprint, error)

	// StoreCode reports whether a handler's answer with this code is
	// stored and replayed. An answer it refuses is returned, its
	// transaction rolled back, and a retry runs the handler again.
	// Default: DefaultStoreCode.
	StoreCode func(codes.Code) bool

	// RetryAfter is the delay put in the RetryInfo detail of Aborted and
	// Unavailable answers. Default: DefaultRetryAfter.
	RetryAfter time.Duration

	// Logger receives the errors behind Internal and Unavailable answers
	// and the calls refused for a missing principal. Default:
	// slog.Default().
	Logger *slog.Logger
}

// DefaultStoreCode is the Config.StoreCode used when none is set. Like
// idem.DefaultStoreStatus for HTTP, it stores outcomes and refuses the codes
// that say "not now": OK and the client's mistakes (InvalidArgument,
// NotFound, AlreadyExists, PermissionDenied, Unauthenticated,
// FailedPrecondition, OutOfRange) are stored; Canceled, Unknown,
// DeadlineExceeded, ResourceExhausted, Aborted, Unimplemented, Internal,
// Unavailable and DataLoss are not, so a retry runs the handler.
func DefaultStoreCode(c codes.Code) bool {
	switch c {
	case codes.OK, codes.InvalidArgument, codes.NotFound, codes.AlreadyExists, codes.PermissionDenied,
		codes.Unauthenticated, codes.FailedPrecondition, codes.OutOfRange:
		return true
	}
	return false
}

// DefaultFingerprint hashes the full method name and the request's
// deterministic protobuf encoding (proto.MarshalOptions{Deterministic:
// true}), so map fields in any order give one fingerprint. The request must
// be a proto.Message.
func DefaultFingerprint(fullMethod string, req any) (idem.Fingerprint, error) {
	m, ok := req.(proto.Message)
	if !ok {
		return idem.Fingerprint{}, fmt.Errorf("idemgrpc: request of %s is a %T, not a proto.Message; set Config.Fingerprint", fullMethod, req)
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		return idem.Fingerprint{}, fmt.Errorf("idemgrpc: encode the request of %s: %w", fullMethod, err)
	}
	var h idem.Hasher
	h.AddString("grpc")
	h.AddString(fullMethod)
	h.Add(b)
	return h.Sum(), nil
}

// Server runs unary handlers inside idempotent transactions of one Store.
// It is safe for concurrent use.
type Server[TTx any] struct {
	store *idem.Store[TTx]
	cfg   Config
}

// New returns a Server on store. It fails for a nil store, a missing
// Principal or a negative RetryAfter, with an error matching
// idem.ErrInvalidConfig.
func New[TTx any](store *idem.Store[TTx], cfg Config) (*Server[TTx], error) {
	if store == nil {
		return nil, fmt.Errorf("idemgrpc: %w: nil store", idem.ErrInvalidConfig)
	}
	if cfg.Principal == nil {
		return nil, fmt.Errorf("idemgrpc: %w: Config.Principal is required: keys must be scoped to who sends them", idem.ErrInvalidConfig)
	}
	if cfg.Protect == nil {
		cfg.Protect = DefaultProtect
	}
	if cfg.Fingerprint == nil {
		cfg.Fingerprint = DefaultFingerprint
	}
	if cfg.StoreCode == nil {
		cfg.StoreCode = DefaultStoreCode
	}
	switch {
	case cfg.RetryAfter < 0:
		return nil, fmt.Errorf("idemgrpc: %w: RetryAfter %v is negative", idem.ErrInvalidConfig, cfg.RetryAfter)
	case cfg.RetryAfter == 0:
		cfg.RetryAfter = DefaultRetryAfter
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Server[TTx]{store: store, cfg: cfg}, nil
}

// UnaryInterceptor returns the interceptor to install with
// grpc.ChainUnaryInterceptor, after authentication:
//
//	grpc.NewServer(grpc.ChainUnaryInterceptor(auth, s.UnaryInterceptor()))
//
// A protected call needs an idempotency-key metadata entry. It runs the
// handler inside the store's transaction (reach it with Tx), stores the
// answer with the handler's writes and sends it after the commit. A retry
// with the same key gets the stored answer, message or status, with
// idempotent-replayed: true in the response header.
func (s *Server[TTx]) UnaryInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if !s.cfg.Protect(info.FullMethod) {
			return handler(ctx, req)
		}
		if md, _ := metadata.FromIncomingContext(ctx); s.cfg.KeyOptional && md.Get(MetadataKey) == nil {
			s.store.Keyless(ctx, Scope(s.cfg.Principal(ctx), info.FullMethod))
			return handler(ctx, req)
		}
		return s.serve(ctx, req, info.FullMethod, handler)
	}
}

// answer is what one run of the handler returned.
type answer struct {
	resp any
	err  error
}

// handlerError marks an error the handler returned that is not stored, so
// it reaches the client as the handler gave it.
type handlerError struct{ err error }

func (e *handlerError) Error() string { return e.err.Error() }
func (e *handlerError) Unwrap() error { return e.err }

func (s *Server[TTx]) serve(ctx context.Context, req any, method string, handler grpc.UnaryHandler) (any, error) {
	key, err := keyFrom(ctx)
	if err != nil {
		return nil, err
	}
	principal := s.cfg.Principal(ctx)
	if principal == "" && !s.cfg.AllowAnonymous {
		s.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "idemgrpc: refused a call without a principal; install the interceptor after authentication, or set Config.AllowAnonymous for methods anonymous by design",
			slog.String("method", method))
		return nil, withInfo(codes.PermissionDenied, "this call carries an idempotency key but no authenticated caller to scope it to; nothing was done", ReasonPrincipalMissing)
	}
	fp, err := s.cfg.Fingerprint(method, req)
	if err != nil {
		s.cfg.Logger.LogAttrs(ctx, slog.LevelError, "idemgrpc: fingerprint failed", slog.String("method", method), slog.Any("error", err))
		return nil, status.Error(codes.Internal, "the request could not be fingerprinted; nothing was done")
	}
	ireq := idem.Request{Scope: Scope(principal, method), Key: key, Fingerprint: fp}

	var (
		last  answer // the handler's last run
		res   idem.Result
		found bool // a record under the former scope form answered
	)
	if s.cfg.FormerScopes {
		res, found, err = s.store.Answered(ctx, formerScope(principal, method), key, fp)
	}
	if !found && err == nil {
		res, err = s.store.Do(ctx, ireq, s.doFunc(req, method, handler, &last))
	}
	if err != nil {
		if errors.Is(err, idem.ErrTxAborted) && last.err != nil {
			s.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "idemgrpc: handler answered an error after a statement of its transaction failed and aborted it: answer sent, not stored; rolled back", slog.String("method", method),
				slog.String("scope", ireq.Scope), slog.String("key", ireq.Key), slog.Any("error", err))
			return nil, last.err // the handler's own answer, not stored
		}
		return nil, s.failed(ctx, ireq, method, err)
	}
	switch res.Outcome {
	case idem.Won:
		return last.resp, last.err
	case idem.Replay:
		_ = grpc.SetHeader(ctx, metadata.Pairs(MetadataReplayed, "true")) // fails only outside a server call
		return replay(method, res.Response.Body)
	case idem.Mismatch:
		return nil, withInfo(codes.FailedPrecondition,
			"this idempotency key was already used with a different request; use a new key for a new operation", ReasonMismatch)
	case idem.InFlight:
		msg, reason := "a call with this idempotency key is still in progress; retry later with the same key", ReasonInFlight
		switch {
		case res.Busy && res.Record.Key == "":
			msg, reason = "the database was busy with other writes past the wait bound, so whether another call holds this idempotency key is not known; nothing was done; retry soon with the same key", ReasonDatabaseBusy
		case res.Record.Key == "":
			msg = "the call could not claim its idempotency key in time: another call holds it, or the database is busy; retry later with the same key"
		}
		return nil, s.retryLater(codes.Aborted, msg, reason)
	}
	return nil, s.failed(ctx, ireq, method, fmt.Errorf("idemgrpc: unexpected outcome %v", res.Outcome))
}

// doFunc is Do's function for one call: the handler in the transaction, its
// answer encoded for the store and kept in last.
func (s *Server[TTx]) doFunc(req any, method string, handler grpc.UnaryHandler, last *answer) func(context.Context, TTx) (idem.Response, error) {
	return func(ctx context.Context, tx TTx) (idem.Response, error) {
		*last = answer{}
		resp, herr := handler(context.WithValue(ctx, txKey{}, &run{tx: tx}), req)
		if herr != nil {
			st, isStatus := status.FromError(herr)
			if !isStatus || !s.cfg.StoreCode(st.Code()) {
				// A plain error may be a database error worth retrying
				// (a serialization failure): Do classifies it.
				return idem.Response{}, &handlerError{err: herr}
			}
			last.err = herr
			return idem.Response{Status: idem.NoStatus, Body: encodeOutcome(st.Proto(), nil)}, nil
		}
		var b []byte
		if resp != nil {
			m, ok := resp.(proto.Message)
			if !ok {
				return idem.Response{}, fmt.Errorf("idemgrpc: response of %s is a %T, not a proto.Message", method, resp)
			}
			var err error
			if b, err = proto.Marshal(m); err != nil {
				return idem.Response{}, fmt.Errorf("idemgrpc: encode the response of %s: %w", method, err)
			}
		}
		last.resp = resp
		return idem.Response{Status: idem.NoStatus, Body: encodeOutcome(nil, b)}, nil
	}
}

// failed turns an error from Do into the call's status: nothing was stored,
// or (ErrCommitUnknown) it is not known whether it was.
func (s *Server[TTx]) failed(ctx context.Context, req idem.Request, method string, err error) error {
	log := func(msg string) {
		s.cfg.Logger.LogAttrs(ctx, slog.LevelError, "idemgrpc: "+msg, slog.String("method", method),
			slog.String("scope", req.Scope), slog.String("key", req.Key), slog.Any("error", err))
	}
	var (
		herr  *handlerError
		ended *idem.TxEndedError
	)
	switch {
	case errors.Is(err, idem.ErrCommitUnknown):
		log("commit outcome unknown")
		return s.retryLater(codes.Unavailable, "the database connection was lost while committing, so it is not known whether the call took effect; retry with the same key: you will get its result, or it will be done once", ReasonCommitUnknown)
	case errors.Is(err, idem.ErrRetriesExhausted):
		log("transaction kept failing with retryable errors")
		return s.retryLater(codes.Aborted, "the call conflicted with concurrent ones and was rolled back; retry with the same key", ReasonStoreUnavailable)
	case errors.Is(err, idem.ErrTooLarge):
		log("response too large to store; rolled back")
		return status.Error(codes.Internal, "the response was too large to store for replay, so the call was rolled back; retrying will not help")
	case errors.As(err, &ended):
		log("handler ended the transaction itself")
		return status.Error(codes.Internal, "the call's transaction was ended before its response could be stored")
	case errors.As(err, &herr):
		return herr.err // not stored, rolled back: the handler's own answer
	case errors.Is(err, idem.ErrTxAborted):
		log("handler answered success after a statement of its transaction failed and aborted it; rolled back")
		return status.Error(codes.Internal, "the call failed and was rolled back; nothing was stored")
	case ctx.Err() != nil:
		return status.FromContextError(ctx.Err()).Err()
	}
	log("store failed; nothing stored")
	return s.retryLater(codes.Unavailable, "the call could not be recorded and was rolled back; retry with the same key", ReasonStoreUnavailable)
}

// keyFrom reads and checks the idempotency-key metadata entry.
func keyFrom(ctx context.Context) (string, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	keys := md.Get(MetadataKey)
	switch len(keys) {
	case 0:
		return "", withInfo(codes.InvalidArgument, "this method requires an "+MetadataKey+" metadata entry; make one key per operation and send it with every retry", ReasonKeyMissing)
	case 1:
	default:
		return "", withInfo(codes.InvalidArgument, fmt.Sprintf("%d %s metadata entries, want one", len(keys), MetadataKey), ReasonKeyInvalid)
	}
	if err := idem.ValidateKey(keys[0]); err != nil {
		return "", withInfo(codes.InvalidArgument, strings.TrimPrefix(err.Error(), "idem: "), ReasonKeyInvalid)
	}
	return keys[0], nil
}

// formerScope is the scope idem v0.0 built for a call: the transport, the
// method and the principal quoted, or a hash of them when that was too
// long.
func formerScope(principal, method string) string {
	s := "grpc " + strconv.Quote(method) + " " + strconv.Quote(principal)
	if len(s) <= idem.MaxScopeBytes {
		return s
	}
	var h idem.Hasher
	h.AddString("idemgrpc scope")
	h.AddString(method)
	h.AddString(principal)
	f := h.Sum()
	return fmt.Sprintf("grpc sha256:%x", f[:])
}

// Scope is the scope of a call by principal to fullMethod, as the server
// interceptor builds it: idem.Scope with the principal first, then "rpc:"
// and the quoted method,
//
//	"tenant-7" rpc:"/orders.v1.Orders/Create"
//
// so idem.ScopePrefix(principal) selects one tenant's records over HTTP
// and gRPC alike. The "rpc:" cannot begin an idemhttp scope's method (a
// colon is not an HTTP token character).
func Scope(principal, fullMethod string) string {
	return idem.Scope(principal, "rpc:"+strconv.Quote(fullMethod))
}
