package idemgrpc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemrpc"
)

// Metadata names of the protocol (gRPC metadata keys are lower case).
const (
	// MetadataKey carries the client's idempotency key.
	MetadataKey = idemrpc.MetadataKey
	// MetadataReplayed is "true" in the response header of a replayed call.
	MetadataReplayed = idemrpc.MetadataReplayed
)

// DefaultRetryAfter is the retry delay sent with Aborted and Unavailable
// answers when Config.RetryAfter is zero.
const DefaultRetryAfter = idemrpc.DefaultRetryAfter

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
	// installed on but gRPC's own services (health, reflection, channelz,
	// CSDS). When it is set, the stream interceptor asks it about streams
	// too, and refuses those it selects.
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
// that are not one: OK and the answers about the state a call met
// (NotFound, AlreadyExists, PermissionDenied, Unauthenticated,
// FailedPrecondition, OutOfRange) are stored; InvalidArgument (the request
// failed validation and never began: the client may correct it and call
// again with the same key) and the codes that say "not now" (Canceled,
// Unknown, DeadlineExceeded, ResourceExhausted, Aborted, Unimplemented,
// Internal, Unavailable and DataLoss) are not, so the next call with the key
// runs the handler. NotAnOutcome marks any other answer the same way.
func DefaultStoreCode(c codes.Code) bool { return idemrpc.DefaultStoreCode(idemrpc.Code(c)) }

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
	core *idemrpc.Server[TTx]
	cfg  Config
	// protectStreams: Config.Protect was set, so the stream interceptor
	// asks it about streams too; DefaultProtect selects none.
	protectStreams bool
}

// New returns a Server on store. It fails for a nil store, a missing
// Principal or a negative RetryAfter, with an error matching
// idem.ErrInvalidConfig.
func New[TTx any](store *idem.Store[TTx], cfg Config) (*Server[TTx], error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	core, err := idemrpc.NewServer(store, idemrpc.Config{
		Transport:      "idemgrpc",
		Subject:        "method",
		KeyField:       MetadataKey + " metadata entry",
		AllowAnonymous: cfg.AllowAnonymous,
		KeyOptional:    cfg.KeyOptional,
		RetryAfter:     cfg.RetryAfter,
		Logger:         cfg.Logger,
	})
	if err != nil {
		return nil, err
	}
	if cfg.Principal == nil {
		return nil, fmt.Errorf("idemgrpc: %w: Config.Principal is required: keys must be scoped to who sends them", idem.ErrInvalidConfig)
	}
	s := &Server[TTx]{core: core, cfg: cfg, protectStreams: cfg.Protect != nil}
	if s.cfg.Protect == nil {
		s.cfg.Protect = DefaultProtect
	}
	if s.cfg.Fingerprint == nil {
		s.cfg.Fingerprint = DefaultFingerprint
	}
	if s.cfg.StoreCode == nil {
		s.cfg.StoreCode = DefaultStoreCode
	}
	return s, nil
}

// UnaryInterceptor returns the interceptor to install with
// grpc.ChainUnaryInterceptor, after authentication:
//
//	grpc.NewServer(grpc.ChainUnaryInterceptor(auth, s.UnaryInterceptor()),
//		grpc.ChainStreamInterceptor(s.StreamInterceptor()))
//
// A protected call needs an idempotency-key metadata entry. It runs the
// handler inside the store's transaction (reach it with Tx), stores the
// answer with the handler's writes, its header and trailer metadata
// included, and sends it after the commit. A retry with the same key gets
// the stored answer, message or status, with the stored header and trailer
// and idempotent-replayed: true in the header.
//
// The header and trailer a handler sets (grpc.SetHeader, SendHeader and
// SetTrailer on its context) are kept until the call is answered, and only
// those of the run that answers are sent: a run rolled back for a
// retryable database error sends nothing. So SendHeader sends nothing at
// once, and grpc.SetSendCompressor fails on the handler's context (it
// needs gRPC's own stream): call it in an interceptor outside this one.
//
// Each run of the handler gets the request as the client sent it: a later
// run (after a retryable database error) gets a copy, never what a
// rolled-back run changed in place.
//
// A call already inside a run of the same store (this interceptor chained
// twice, or two Servers on one store) goes through untouched when it
// carries that run's key or none: its handler works in the outer run's
// transaction. With another key it is refused (INTERCEPTOR_NESTED).
func (s *Server[TTx]) UnaryInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if !s.cfg.Protect(info.FullMethod) {
			return handler(ctx, req)
		}
		method := info.FullMethod
		md, _ := metadata.FromIncomingContext(ctx)
		principal := s.cfg.Principal(ctx)
		call := idemrpc.Call{
			Method:      method,
			Keys:        md.Get(MetadataKey),
			Principal:   principal,
			Scope:       Scope(principal, method),
			Fingerprint: func() (idem.Fingerprint, error) { return s.cfg.Fingerprint(method, req) },
		}
		if s.cfg.FormerScopes {
			call.FormerScope = formerScope(principal, method)
		}
		var last answer // the handler's last run
		next := runRequests(req)
		served, err := s.core.Serve(ctx, call, func(ctx context.Context, _ TTx) (idem.Response, error) {
			return s.run(ctx, next(), method, handler, &last)
		})
		if err != nil {
			return nil, statusOf(err)
		}
		switch served.Verdict {
		case idemrpc.Pass:
			return handler(ctx, req)
		case idemrpc.Ran:
			if served.Aborted != nil {
				if e := s.core.Aborted(ctx, method, served, last.err != nil); e != nil {
					return nil, statusOf(e)
				}
			}
			send(ctx, last.header, last.trailer)
			return last.resp, last.err
		}
		return s.replay(ctx, method, served)
	}
}

// StreamInterceptor returns the stream interceptor, to install with
// grpc.ChainStreamInterceptor. Idempotency keys protect unary calls only,
// so a streaming method must never run as if its key protected it: when
// Config.Protect is set, a stream it selects is refused with Unimplemented
// (reason STREAM_UNSUPPORTED) and logged, before its handler runs; under
// Config.KeyOptional a stream without a key goes through, as a keyless
// call would. Without Protect set (DefaultProtect is for unary methods)
// every stream goes through untouched, as under idemconnect's
// DefaultProtect.
func (s *Server[TTx]) StreamInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if !s.protectStreams || !s.cfg.Protect(info.FullMethod) {
			return handler(srv, ss)
		}
		ctx := ss.Context()
		md, _ := metadata.FromIncomingContext(ctx)
		scope := func() string { return Scope(s.cfg.Principal(ctx), info.FullMethod) }
		if err := s.core.Stream(ctx, info.FullMethod, md.Get(MetadataKey), scope); err != nil {
			return statusOf(err)
		}
		return handler(srv, ss)
	}
}

// runRequests returns what gives each run of the handler its request: req
// itself to the first, and to each later one a copy of req as the client
// sent it (taken before the first run). A run the database rolled back
// may have changed its request in place (set a default, appended an
// item); the next run must see what the client sent, which is what the
// fingerprint covers.
func runRequests(req any) func() any {
	m, ok := req.(proto.Message)
	if !ok || !m.ProtoReflect().IsValid() { // no message, or a nil one
		return func() any { return req }
	}
	var sent proto.Message
	return func() any {
		if sent == nil {
			sent = proto.Clone(m)
			return req
		}
		return proto.Clone(sent)
	}
}

// answer is what one run of the handler answered.
type answer struct {
	resp            any
	err             error
	header, trailer metadata.MD
}

// run runs the handler once, in the run's transaction (ctx), on a stream
// of its own that keeps the header and trailer the run sets; it keeps the
// run's answer in last and returns what to store.
func (s *Server[TTx]) run(ctx context.Context, req any, method string, handler grpc.UnaryHandler, last *answer) (idem.Response, error) {
	stream := &runStream{method: method}
	resp, herr := handler(grpc.NewContextWithServerTransportStream(ctx, stream), req)
	header, trailer := stream.metadata()
	*last = answer{resp: resp, err: herr, header: header, trailer: trailer}
	// errors.As: an interceptor between this one and the handler may
	// have wrapped the marked error.
	if marked := (*notAnOutcome)(nil); errors.As(herr, &marked) {
		last.err = marked.err // sent as the handler's own, without the mark
		return idem.Response{}, idemrpc.Unstored(marked.err)
	}
	if herr != nil {
		st, isStatus := status.FromError(herr)
		if !isStatus || !s.cfg.StoreCode(st.Code()) {
			// A plain error may be a database error worth retrying (a
			// serialization failure): Do classifies it.
			return idem.Response{}, idemrpc.Unstored(herr)
		}
		return idem.Response{Status: idem.NoStatus, Header: headerOf(header),
			Body: outcome{status: st.Proto(), trailer: trailer}.encode()}, nil
	}
	var b []byte
	if resp != nil {
		m, ok := resp.(proto.Message)
		if !ok {
			return idem.Response{}, idemrpc.Unstorable(fmt.Errorf("idemgrpc: response of %s is a %T, not a proto.Message", method, resp))
		}
		var err error
		if b, err = proto.Marshal(m); err != nil {
			return idem.Response{}, idemrpc.Unstorable(fmt.Errorf("idemgrpc: encode the response of %s: %w", method, err))
		}
	}
	return idem.Response{Status: idem.NoStatus, Header: headerOf(header), Body: outcome{trailer: trailer, message: b}.encode()}, nil
}

// replay answers with the stored answer: its header, marked replayed, its
// trailer, and its status, or a response message decoded from the stored
// bytes.
func (s *Server[TTx]) replay(ctx context.Context, method string, served idemrpc.Served) (any, error) {
	o, err := decodeOutcome(served.Stored.Body)
	var m proto.Message
	if err == nil && o.status == nil {
		m = newResponse(method)
		if uerr := proto.Unmarshal(o.message, m); uerr != nil {
			err = fmt.Errorf("%w: the message does not decode as %s: %w", errCorruptOutcome, m.ProtoReflect().Descriptor().FullName(), uerr)
		}
	}
	if err != nil {
		return nil, statusOf(s.core.Unreadable(ctx, method, served, err))
	}
	header := metadata.MD(served.Stored.Header).Copy()
	header.Set(MetadataReplayed, "true")
	send(ctx, header, o.trailer)
	if o.status != nil {
		return nil, status.ErrorProto(o.status)
	}
	return m, nil
}

// send sets the call's header and trailer. It fails only outside a server
// call, or when something outside the interceptor sent the header already;
// then there is no one to tell.
func send(ctx context.Context, header, trailer metadata.MD) {
	_ = grpc.SetHeader(ctx, header)
	_ = grpc.SetTrailer(ctx, trailer)
}

// runStream is the transport stream a handler run sees: it keeps the
// header and trailer the run sets until the call is answered, so that a
// run rolled back sends none of them.
type runStream struct {
	method string

	mu              sync.Mutex
	header, trailer metadata.MD
	headerSent      bool
}

// errHeaderSent is SetHeader or SendHeader after SendHeader, refused as
// gRPC refuses it.
var errHeaderSent = status.Error(codes.Internal, "idemgrpc: the header was sent already (SendHeader)")

func (r *runStream) Method() string { return r.method }

func (r *runStream) SetHeader(md metadata.MD) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.headerSent {
		return errHeaderSent
	}
	r.header = metadata.Join(r.header, md)
	return nil
}

func (r *runStream) SendHeader(md metadata.MD) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.headerSent {
		return errHeaderSent
	}
	r.header, r.headerSent = metadata.Join(r.header, md), true
	return nil
}

func (r *runStream) SetTrailer(md metadata.MD) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.trailer = metadata.Join(r.trailer, md)
	return nil
}

// metadata returns what the run set.
func (r *runStream) metadata() (header, trailer metadata.MD) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.header.Copy(), r.trailer.Copy()
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
