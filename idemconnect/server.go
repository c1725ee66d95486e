package idemconnect

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemrpc"
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
const DefaultRetryAfter = idemrpc.DefaultRetryAfter

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
	// but gRPC's own services (health, reflection, channelz, CSDS). A
	// streaming procedure it selects is refused.
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
// policy as idemgrpc.DefaultStoreCode: the answers about the state a call
// met (NotFound, AlreadyExists, PermissionDenied, Unauthenticated,
// FailedPrecondition, OutOfRange) are stored; InvalidArgument (the request
// failed validation and never began: the client may correct it and call
// again with the same key) and the codes that say "not now" (Canceled,
// Unknown, DeadlineExceeded, ResourceExhausted, Aborted, Unimplemented,
// Internal, Unavailable and DataLoss) are not, so the next call with the key
// runs the handler. NotAnOutcome marks any other answer the same way.
func DefaultStoreCode(c connect.Code) bool {
	return c != 0 && idemrpc.DefaultStoreCode(idemrpc.Code(c))
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
	core *idemrpc.Server[TTx]
	cfg  Config
}

// New returns a Server on store. It fails for a nil store, a missing
// Principal or a negative RetryAfter, with an error matching
// idem.ErrInvalidConfig.
func New[TTx any](store *idem.Store[TTx], cfg Config) (*Server[TTx], error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	core, err := idemrpc.NewServer(store, idemrpc.Config{
		Transport:      "idemconnect",
		Subject:        "procedure",
		KeyField:       HeaderKey + " header",
		AllowAnonymous: cfg.AllowAnonymous,
		RetryAfter:     cfg.RetryAfter,
		Logger:         cfg.Logger,
	})
	if err != nil {
		return nil, err
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
	return &Server[TTx]{core: core, cfg: cfg}, nil
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
// true.
//
// A streaming procedure that Config.Protect selects is refused with
// Unimplemented (reason STREAM_UNSUPPORTED) before its handler runs: a key
// protects a unary call only, and a stream must never run as if it were
// protected. DefaultProtect selects no stream. A call already inside a run
// of the same store (this interceptor installed twice, or two Servers on
// one store) goes through untouched when it carries that run's key or none:
// its handler works in the outer run's transaction; with another key it is
// refused (INTERCEPTOR_NESTED). On a client it does nothing.
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

func (i serverInterceptor[TTx]) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		if spec := conn.Spec(); spec.IsClient || !i.s.cfg.Protect(spec) {
			return next(ctx, conn)
		}
		if err := i.s.core.Stream(ctx, conn.Spec().Procedure, conn.RequestHeader().Values(HeaderKey), nil); err != nil {
			return errorFor(err)
		}
		return next(ctx, conn)
	}
}

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

// requestReset returns what to call before each run of the handler: the
// first call keeps a copy of req's message and header as the client sent
// them, and each later one puts them back in place. A run the database
// rolled back may have changed its request (set a default, appended an
// item, added a header); the next run must see what the client sent,
// which is what the fingerprint covers.
func requestReset(req connect.AnyRequest) func() {
	m, _ := req.Any().(proto.Message)
	if m != nil && !m.ProtoReflect().IsValid() {
		m = nil // a nil message: nothing to keep
	}
	var (
		kept   bool
		msg    proto.Message
		header http.Header
	)
	return func() {
		if !kept {
			kept = true
			header = req.Header().Clone()
			if m != nil {
				msg = proto.Clone(m)
			}
			return
		}
		resetHeader(req.Header(), header)
		if m != nil {
			proto.Reset(m)
			proto.Merge(m, msg)
		}
	}
}

// answer is what one run of the handler answered; what it set through
// connect.CallInfo stays in the CallInfo.
type answer struct {
	resp connect.AnyResponse
	err  error
}

func (s *Server[TTx]) serve(ctx context.Context, req connect.AnyRequest, next connect.UnaryFunc) (connect.AnyResponse, error) {
	spec := req.Spec()
	procedure := spec.Procedure
	out, err := outputType(spec)
	if err != nil {
		s.cfg.Logger.LogAttrs(ctx, slog.LevelError, "idemconnect: cannot protect a procedure without a protobuf schema", slog.String("procedure", procedure), slog.Any("error", err))
		return nil, withInfo(connect.CodeInternal, "this procedure's answers cannot be stored for replay (no protobuf schema); nothing was done", ReasonNoSchema)
	}
	principal := s.cfg.Principal(ctx, req)
	call := idemrpc.Call{
		Method:      procedure,
		Keys:        req.Header().Values(HeaderKey),
		Principal:   principal,
		Scope:       Scope(principal, procedure),
		Fingerprint: func() (idem.Fingerprint, error) { return s.cfg.Fingerprint(procedure, req.Any()) },
	}

	// Headers a handler sets through connect.CallInfo are kept by connect
	// across runs and sent with any answer: put them back as they were
	// before each run, store what the run added, and put them back again
	// unless the last run answers.
	info, hasInfo := connect.CallInfoForHandlerContext(ctx)
	var savedHeader, savedTrailer http.Header
	if hasInfo {
		savedHeader, savedTrailer = info.ResponseHeader().Clone(), info.ResponseTrailer().Clone()
	}
	restore := func() {
		if hasInfo {
			resetHeader(info.ResponseHeader(), savedHeader)
			resetHeader(info.ResponseTrailer(), savedTrailer)
		}
	}

	var last answer // the handler's last run
	resetRequest := requestReset(req)
	served, err := s.core.Serve(ctx, call, func(ctx context.Context, _ TTx) (idem.Response, error) {
		restore()
		resetRequest()
		resp, herr := next(ctx, req)
		last = answer{resp: resp, err: herr}
		// errors.As: an interceptor between this one and the handler
		// may have wrapped the marked error.
		if marked := (*notAnOutcome)(nil); errors.As(herr, &marked) {
			last.err = marked.err // sent as the handler's own, without the mark
			return idem.Response{}, idemrpc.Unstored(marked.err)
		}
		var infoHeader, infoTrailer http.Header
		if hasInfo {
			infoHeader = headerDiff(savedHeader, info.ResponseHeader())
			infoTrailer = headerDiff(savedTrailer, info.ResponseTrailer())
		}
		if herr != nil {
			var ce *connect.Error
			if !errors.As(herr, &ce) || !s.cfg.StoreCode(ce.Code()) {
				// A plain error may be a database error worth retrying
				// (a serialization failure): Do classifies it.
				return idem.Response{}, idemrpc.Unstored(herr)
			}
			header := mergeInto(ce.Meta().Clone(), infoHeader)
			return idem.Response{Status: idem.NoStatus, Header: header,
				Body: outcome{status: statusOf(ce), trailer: infoTrailer}.encode()}, nil
		}
		m, ok := resp.Any().(proto.Message)
		if !ok {
			return idem.Response{}, idemrpc.Unstorable(fmt.Errorf("idemconnect: response of %s is a %T, not a proto.Message", procedure, resp.Any()))
		}
		if got, want := m.ProtoReflect().Descriptor().FullName(), out.Descriptor().FullName(); got != want {
			return idem.Response{}, idemrpc.Unstorable(fmt.Errorf("idemconnect: response of %s is a %s, but its schema says %s", procedure, got, want))
		}
		b, err := proto.Marshal(m)
		if err != nil {
			return idem.Response{}, idemrpc.Unstorable(fmt.Errorf("idemconnect: encode the response of %s: %w", procedure, err))
		}
		header := mergeInto(resp.Header().Clone(), infoHeader)
		trailer := mergeInto(resp.Trailer().Clone(), infoTrailer)
		return idem.Response{Status: idem.NoStatus, Header: header, Body: outcome{trailer: trailer, message: b}.encode()}, nil
	})
	if err == nil && served.Verdict == idemrpc.Ran && served.Aborted != nil {
		if e := s.core.Aborted(ctx, procedure, served, last.err != nil); e != nil {
			err = e // a success whose work was rolled back
		}
	}
	if err == nil && served.Verdict == idemrpc.Ran {
		return last.resp, last.err
	}
	restore() // no run of the handler answers: what one set is not sent
	switch {
	case err != nil:
		return nil, errorFor(err)
	case served.Verdict == idemrpc.Pass:
		return next(ctx, req)
	}
	return s.replay(ctx, procedure, out, served)
}

// replay turns a stored answer back into the handler's: the stored error,
// or a message of the schema's output type decoded from the stored bytes,
// with the stored header and trailers and Idempotent-Replayed: true.
func (s *Server[TTx]) replay(ctx context.Context, procedure string, out protoreflect.MessageType, served idemrpc.Served) (connect.AnyResponse, error) {
	stored := served.Stored
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
		return nil, errorFor(s.core.Unreadable(ctx, procedure, served, err))
	}
	e := errorOf(o.status)
	mergeInto(e.Meta(), stored.Header)
	mergeInto(e.Meta(), o.trailer)
	e.Meta().Set(HeaderReplayed, "true")
	return nil, e
}
