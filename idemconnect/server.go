package idemconnect

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/idemkit/idem"
)

// Header names of the protocol, the same as idemhttp's.
const (
	// HeaderKey carries the client's idempotency key.
	HeaderKey = "Idempotency-Key"
	// HeaderReplayed is "true" in the response header (for an error: its
	// metadata) of a replayed answer.
	HeaderReplayed = "Idempotent-Replayed"
)

// DefaultRetryAfter is the retry delay sent with Aborted and Unavailable
// answers when Config.RetryAfter is zero.
const DefaultRetryAfter = time.Second

// Config tunes a Server. Principal is required; every other zero field
// means its default.
type Config struct {
	// Principal returns who is calling: the authenticated user, client or
	// tenant, usually put in the context by an authentication interceptor
	// that runs before this one (or read from req's header). It is part of
	// every key's scope, so one client's key can never replay another's
	// answer. A call for which it returns "" is refused with
	// PermissionDenied and logged, unless AllowAnonymous is set.
	Principal func(ctx context.Context, req connect.AnyRequest) string

	// AllowAnonymous accepts calls whose Principal is "". They all share
	// one scope: one anonymous caller can replay another's stored answer
	// (with the same key and request). Set it only for procedures that are
	// anonymous by design and whose answers hold nothing private.
	AllowAnonymous bool

	// Protect reports whether a procedure requires a key and runs in a
	// transaction; spec.Procedure is its name, "/pkg.Service/Method".
	// Other calls pass through untouched. Default: DefaultProtect, every
	// unary procedure not declared free of side effects or idempotent,
	// but gRPC's health and reflection services.
	Protect func(spec connect.Spec) bool

	// Fingerprint hashes what the call asks for; the same key with another
	// fingerprint is refused (FailedPrecondition). Default:
	// DefaultFingerprint (the procedure and the request message's
	// deterministic protobuf encoding).
	Fingerprint func(procedure string, req any) (idem.Fingerprint, error)

	// StoreCode reports whether a handler's connect error with this code is
	// stored and replayed. An error it refuses, or one that is no
	// *connect.Error, is returned, its transaction rolled back, and a retry
	// runs the handler again. Successes are always stored. Default:
	// DefaultStoreCode.
	StoreCode func(connect.Code) bool

	// RetryAfter is the delay put in the RetryInfo detail of Aborted and
	// Unavailable answers. Default: DefaultRetryAfter.
	RetryAfter time.Duration

	// Logger receives the errors behind Internal and Unavailable answers
	// and the calls refused for a missing principal. Default:
	// slog.Default().
	Logger *slog.Logger
}

// DefaultStoreCode is the Config.StoreCode used when none is set, the same
// policy as idemgrpc.DefaultStoreCode: the client's mistakes
// (InvalidArgument, NotFound, AlreadyExists, PermissionDenied,
// Unauthenticated, FailedPrecondition, OutOfRange) are stored; Canceled,
// Unknown, DeadlineExceeded, ResourceExhausted, Aborted, Unimplemented,
// Internal, Unavailable and DataLoss are not, so a retry runs the handler.
func DefaultStoreCode(c connect.Code) bool {
	switch c {
	case connect.CodeInvalidArgument, connect.CodeNotFound, connect.CodeAlreadyExists, connect.CodePermissionDenied,
		connect.CodeUnauthenticated, connect.CodeFailedPrecondition, connect.CodeOutOfRange:
		return true
	}
	return false
}

// DefaultFingerprint hashes the procedure and the request's deterministic
// protobuf encoding (proto.MarshalOptions{Deterministic: true}), so map
// fields in any order give one fingerprint, and the same request sent as
// JSON or as protobuf gives the same one. The request must be a
// proto.Message.
func DefaultFingerprint(procedure string, req any) (idem.Fingerprint, error) {
	m, ok := req.(proto.Message)
	if !ok {
		return idem.Fingerprint{}, fmt.Errorf("idemconnect: request of %s is a %T, not a proto.Message; set Config.Fingerprint", procedure, req)
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		return idem.Fingerprint{}, fmt.Errorf("idemconnect: encode the request of %s: %w", procedure, err)
	}
	var h idem.Hasher
	h.AddString("connect")
	h.AddString(procedure)
	h.Add(b)
	return h.Sum(), nil
}

// Scope is the scope of a call's key: the principal first (so
// idem.ScopePrefix selects a tenant's records), then "connect:" and the
// quoted procedure. It is deliberately not idemgrpc's scope even for the
// same procedure: the two stacks store their answers in different
// encodings, and one must never replay what the other stored.
func Scope(principal, procedure string) string {
	return idem.Scope(principal, "connect:"+strconv.Quote(procedure))
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
		return nil, fmt.Errorf("idemconnect: %w: nil store", idem.ErrInvalidConfig)
	}
	if cfg.Principal == nil {
		return nil, fmt.Errorf("idemconnect: %w: Config.Principal is required: keys must be scoped to who sends them", idem.ErrInvalidConfig)
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
		return nil, fmt.Errorf("idemconnect: %w: RetryAfter %v is negative", idem.ErrInvalidConfig, cfg.RetryAfter)
	case cfg.RetryAfter == 0:
		cfg.RetryAfter = DefaultRetryAfter
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Server[TTx]{store: store, cfg: cfg}, nil
}

// Interceptor returns the handler interceptor, to install with
// connect.WithInterceptors after authentication:
//
//	mux.Handle(ordersv1connect.NewOrdersHandler(svc, connect.WithInterceptors(auth, s.Interceptor())))
//
// A protected call needs an Idempotency-Key header. It runs the handler
// inside the store's transaction (reach it with Tx), stores the answer with
// the handler's writes and sends it after the commit. A retry with the same
// key gets the stored answer, message or error, with Idempotent-Replayed:
// true. On a client, and for streams, it does nothing.
func (s *Server[TTx]) Interceptor() connect.Interceptor { return serverInterceptor[TTx]{s} }

type serverInterceptor[TTx any] struct{ s *Server[TTx] }

func (i serverInterceptor[TTx]) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if spec := req.Spec(); spec.IsClient || !i.s.cfg.Protect(spec) {
			return next(ctx, req)
		}
		return i.s.serve(ctx, req, next)
	}
}

func (serverInterceptor[TTx]) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (serverInterceptor[TTx]) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

// handlerError marks an error the handler returned that is not stored, so
// it reaches the client as the handler gave it.
type handlerError struct{ err error }

func (e *handlerError) Error() string { return e.err.Error() }
func (e *handlerError) Unwrap() error { return e.err }

// answerError marks a handler answer that cannot be stored faithfully: its
// message is not of the schema's output type.
type answerError struct{ msg string }

func (e *answerError) Error() string { return e.msg }

// outputType is the procedure's response type, from its schema: only a
// message built from the schema can be replayed without knowing the
// handler's Go types.
func outputType(spec connect.Spec) (protoreflect.MessageType, error) {
	md, ok := spec.Schema.(protoreflect.MethodDescriptor)
	if !ok {
		return nil, fmt.Errorf("idemconnect: procedure %s has schema %T, not a protoreflect.MethodDescriptor: pass connect.WithSchema (generated code does), or leave it out of Config.Protect", spec.Procedure, spec.Schema)
	}
	return dynamicpb.NewMessageType(md.Output()), nil
}

func (s *Server[TTx]) serve(ctx context.Context, req connect.AnyRequest, next connect.UnaryFunc) (connect.AnyResponse, error) {
	spec := req.Spec()
	procedure := spec.Procedure
	out, err := outputType(spec)
	if err != nil {
		s.cfg.Logger.LogAttrs(ctx, slog.LevelError, "idemconnect: cannot protect a procedure without a protobuf schema", slog.String("procedure", procedure), slog.Any("error", err))
		return nil, withInfo(connect.CodeInternal, "this procedure's answers cannot be stored for replay (no protobuf schema); nothing was done", ReasonNoSchema)
	}
	key, err := keyFrom(req.Header())
	if err != nil {
		return nil, err
	}
	principal := s.cfg.Principal(ctx, req)
	if principal == "" && !s.cfg.AllowAnonymous {
		s.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "idemconnect: refused a call without a principal; install the interceptor after authentication, or set Config.AllowAnonymous for procedures anonymous by design",
			slog.String("procedure", procedure))
		return nil, withInfo(connect.CodePermissionDenied, "this call carries an idempotency key but no authenticated caller to scope it to; nothing was done", ReasonPrincipalMissing)
	}
	fp, err := s.cfg.Fingerprint(procedure, req.Any())
	if err != nil {
		s.cfg.Logger.LogAttrs(ctx, slog.LevelError, "idemconnect: fingerprint failed", slog.String("procedure", procedure), slog.Any("error", err))
		return nil, connect.NewError(connect.CodeInternal, errors.New("the request could not be fingerprinted; nothing was done"))
	}
	ireq := idem.Request{Scope: Scope(principal, procedure), Key: key, Fingerprint: fp}

	// Headers a handler sets through connect.CallInfo are kept by connect
	// across runs; put them back as they were before each run, and store
	// what the run added.
	info, hasInfo := connect.CallInfoForHandlerContext(ctx)
	var savedHeader, savedTrailer http.Header
	if hasInfo {
		savedHeader, savedTrailer = info.ResponseHeader().Clone(), info.ResponseTrailer().Clone()
	}

	var last struct { // the handler's last run
		resp connect.AnyResponse
		err  error
	}
	res, err := s.store.Do(ctx, ireq, func(ctx context.Context, tx TTx) (idem.Response, error) {
		last.resp, last.err = nil, nil
		var infoHeader, infoTrailer http.Header
		if hasInfo {
			resetHeader(info.ResponseHeader(), savedHeader)
			resetHeader(info.ResponseTrailer(), savedTrailer)
		}
		resp, herr := next(context.WithValue(ctx, txKey{}, &run{tx: tx}), req)
		if hasInfo {
			infoHeader = headerDiff(savedHeader, info.ResponseHeader())
			infoTrailer = headerDiff(savedTrailer, info.ResponseTrailer())
		}
		if herr != nil {
			var ce *connect.Error
			if !errors.As(herr, &ce) || !s.cfg.StoreCode(ce.Code()) {
				// A plain error may be a database error worth retrying
				// (a serialization failure): Do classifies it.
				return idem.Response{}, &handlerError{err: herr}
			}
			last.err = herr
			header := mergeInto(ce.Meta().Clone(), infoHeader)
			return idem.Response{Status: idem.NoStatus, Header: header,
				Body: outcome{status: statusOf(ce), trailer: infoTrailer}.encode()}, nil
		}
		m, ok := resp.Any().(proto.Message)
		if !ok {
			return idem.Response{}, &answerError{fmt.Sprintf("idemconnect: response of %s is a %T, not a proto.Message", procedure, resp.Any())}
		}
		if got, want := m.ProtoReflect().Descriptor().FullName(), out.Descriptor().FullName(); got != want {
			return idem.Response{}, &answerError{fmt.Sprintf("idemconnect: response of %s is a %s, but its schema says %s", procedure, got, want)}
		}
		b, err := proto.Marshal(m)
		if err != nil {
			return idem.Response{}, &answerError{fmt.Sprintf("idemconnect: encode the response of %s: %v", procedure, err)}
		}
		last.resp = resp
		header := mergeInto(resp.Header().Clone(), infoHeader)
		trailer := mergeInto(resp.Trailer().Clone(), infoTrailer)
		return idem.Response{Status: idem.NoStatus, Header: header, Body: outcome{trailer: trailer, message: b}.encode()}, nil
	})
	if err != nil {
		if errors.Is(err, idem.ErrTxAborted) && last.err != nil {
			s.cfg.Logger.LogAttrs(ctx, slog.LevelWarn, "idemconnect: handler answered an error after a statement of its transaction failed and aborted it: answer sent, not stored; rolled back", slog.String("procedure", procedure),
				slog.String("scope", ireq.Scope), slog.String("key", ireq.Key), slog.Any("error", err))
			return nil, last.err // the handler's own answer, not stored
		}
		return nil, s.failed(ctx, ireq, procedure, err)
	}
	switch res.Outcome {
	case idem.Won:
		return last.resp, last.err
	case idem.Replay:
		return s.replay(ctx, ireq, procedure, out, res.Response)
	case idem.Mismatch:
		return nil, withInfo(connect.CodeFailedPrecondition,
			"this idempotency key was already used with a different request; use a new key for a new operation", ReasonMismatch)
	case idem.InFlight:
		msg, reason := "a call with this idempotency key is still in progress; retry later with the same key", ReasonInFlight
		switch {
		case res.Busy && res.Record.Key == "":
			msg, reason = "the database was busy with other writes past the wait bound, so whether another call holds this idempotency key is not known; nothing was done; retry soon with the same key", ReasonDatabaseBusy
		case res.Record.Key == "":
			msg = "the call could not claim its idempotency key in time: another call holds it, or the database is busy; retry later with the same key"
		}
		return nil, s.retryLater(connect.CodeAborted, msg, reason)
	}
	return nil, s.failed(ctx, ireq, procedure, fmt.Errorf("idemconnect: unexpected outcome %v", res.Outcome))
}

// replay turns a stored answer back into the handler's: the stored error,
// or a message of the schema's output type decoded from the stored bytes,
// with the stored header and trailers and Idempotent-Replayed: true.
func (s *Server[TTx]) replay(ctx context.Context, req idem.Request, procedure string, out protoreflect.MessageType, stored idem.Response) (connect.AnyResponse, error) {
	o, err := decodeOutcome(stored.Body)
	if err == nil && o.status == nil {
		m := out.New().Interface()
		if err = proto.Unmarshal(o.message, m); err == nil {
			resp := connect.NewResponse(m.(*dynamicpb.Message))
			mergeInto(resp.Header(), stored.Header)
			mergeInto(resp.Trailer(), o.trailer)
			resp.Header().Set(HeaderReplayed, "true")
			return resp, nil
		}
		err = fmt.Errorf("%w: the message does not decode as %s: %w", errCorruptOutcome, out.Descriptor().FullName(), err)
	}
	if err != nil {
		s.cfg.Logger.LogAttrs(ctx, slog.LevelError, "idemconnect: stored answer unreadable", slog.String("procedure", procedure),
			slog.String("scope", req.Scope), slog.String("key", req.Key), slog.Any("error", err))
		return nil, connect.NewError(connect.CodeInternal, errors.New("the stored answer of this call cannot be read; it was not run again"))
	}
	e := errorOf(o.status)
	mergeInto(e.Meta(), stored.Header)
	mergeInto(e.Meta(), o.trailer)
	e.Meta().Set(HeaderReplayed, "true")
	return nil, e
}

// failed turns an error from Do into the call's error: nothing was stored,
// or (ErrCommitUnknown) it is not known whether it was.
func (s *Server[TTx]) failed(ctx context.Context, req idem.Request, procedure string, err error) error {
	log := func(msg string) {
		s.cfg.Logger.LogAttrs(ctx, slog.LevelError, "idemconnect: "+msg, slog.String("procedure", procedure),
			slog.String("scope", req.Scope), slog.String("key", req.Key), slog.Any("error", err))
	}
	var (
		herr  *handlerError
		aerr  *answerError
		ended *idem.TxEndedError
	)
	switch {
	case errors.Is(err, idem.ErrCommitUnknown):
		log("commit outcome unknown")
		return s.retryLater(connect.CodeUnavailable, "the database connection was lost while committing, so it is not known whether the call took effect; retry with the same key: you will get its result, or it will be done once", ReasonCommitUnknown)
	case errors.Is(err, idem.ErrRetriesExhausted):
		log("transaction kept failing with retryable errors")
		return s.retryLater(connect.CodeAborted, "the call conflicted with concurrent ones and was rolled back; retry with the same key", ReasonStoreUnavailable)
	case errors.Is(err, idem.ErrTooLarge):
		log("response too large to store; rolled back")
		return connect.NewError(connect.CodeInternal, errors.New("the response was too large to store for replay, so the call was rolled back; retrying will not help"))
	case errors.As(err, &aerr):
		log("response cannot be stored; rolled back")
		return connect.NewError(connect.CodeInternal, errors.New("the response could not be stored for replay, so the call was rolled back"))
	case errors.As(err, &ended):
		log("handler ended the transaction itself")
		return connect.NewError(connect.CodeInternal, errors.New("the call's transaction was ended before its response could be stored"))
	case errors.As(err, &herr):
		return herr.err // not stored, rolled back: the handler's own answer
	case errors.Is(err, idem.ErrTxAborted):
		log("handler answered success after a statement of its transaction failed and aborted it; rolled back")
		return connect.NewError(connect.CodeInternal, errors.New("the call failed and was rolled back; nothing was stored"))
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return connect.NewError(connect.CodeDeadlineExceeded, ctx.Err())
	case ctx.Err() != nil:
		return connect.NewError(connect.CodeCanceled, ctx.Err())
	}
	log("store failed; nothing stored")
	return s.retryLater(connect.CodeUnavailable, "the call could not be recorded and was rolled back; retry with the same key", ReasonStoreUnavailable)
}

// keyFrom reads and checks the Idempotency-Key header.
func keyFrom(h http.Header) (string, error) {
	keys := h.Values(HeaderKey)
	switch len(keys) {
	case 0:
		return "", withInfo(connect.CodeInvalidArgument, "this procedure requires an "+HeaderKey+" header; make one key per operation and send it with every retry", ReasonKeyMissing)
	case 1:
	default:
		return "", withInfo(connect.CodeInvalidArgument, fmt.Sprintf("%d %s headers, want one", len(keys), HeaderKey), ReasonKeyInvalid)
	}
	if err := idem.ValidateKey(keys[0]); err != nil {
		return "", withInfo(connect.CodeInvalidArgument, strings.TrimPrefix(err.Error(), "idem: "), ReasonKeyInvalid)
	}
	return keys[0], nil
}
