package idemhttp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/idemkit/idem"
)

// Header names of the protocol.
const (
	// HeaderKey carries the client's idempotency key.
	HeaderKey = "Idempotency-Key"
	// HeaderReplayed is "true" on a response replayed from the store.
	HeaderReplayed = "Idempotent-Replayed"
	// HeaderRetention advertises the retention window in whole seconds on
	// every response to a protected request.
	HeaderRetention = "Idempotency-Retention"
)

// Defaults for Config's zero fields.
const (
	// DefaultMaxRequestBody is the largest request body read (1 MiB).
	DefaultMaxRequestBody = 1 << 20
	// DefaultRetryAfter is the Retry-After sent with 409 and 503.
	DefaultRetryAfter = time.Second
)

// Config tunes a Middleware. Principal is required; every other zero field
// means its default.
type Config struct {
	// Principal returns who is asking: the authenticated user, client or
	// tenant. It is part of every key's scope, so one client's key can never
	// replay another's response. The middleware belongs after
	// authentication, where the principal is known. A request for which it
	// returns "" is refused with 403 (code "principal-missing") and logged,
	// unless AllowAnonymous is set.
	Principal func(r *http.Request) string

	// AllowAnonymous accepts requests whose Principal is "". They all share
	// one scope: one anonymous caller can replay another's stored answer
	// (with the same key and body), take keys first, and learn whether a
	// key was used. Set it only for endpoints that are anonymous by design,
	// and whose answers hold nothing private.
	AllowAnonymous bool

	// Methods are the methods that require a key. Requests with other
	// methods pass through untouched, without a transaction. Default: POST
	// and PATCH.
	Methods []string

	// Route names the endpoint in the scope (with the principal and the
	// method) and in the default fingerprint. Keep it a pattern, not the
	// concrete path: a key reused on another resource of the same route is
	// then a mismatch (422), not a fresh key. Default: DefaultRoute (the
	// route an adapter set with WithRoute, else the ServeMux pattern that
	// matched). A protected request whose route is "" is refused (see
	// Unrouted).
	Route func(r *http.Request) string

	// Key reads a protected request's idempotency key from where its sender
	// puts it: HeaderKeyFunc for a header (a webhook's delivery id:
	// "X-GitHub-Delivery", "webhook-id"), JSONKeyFunc for a field of the
	// body (Stripe's event "id"), or a KeyFunc of your own. The key lives
	// in the scope of Principal, method and route like any other, so give
	// each sender its own endpoint, and a Principal that names it (see
	// docs/webhooks.md). When Key or Verify is set, the body is read (up
	// to MaxRequestBody) before the key. Default: DefaultKey (the
	// Idempotency-Key header).
	Key KeyFunc

	// Verify checks each protected request, with its whole body, before
	// its key is read and before anything is claimed: a webhook's
	// signature, for one. A request it refuses gets 401 (or the status of
	// a *VerifyError) with code "unverified", is logged at WARN, and
	// claims, stores and burns nothing, so the genuine request with the
	// same key is served as if the forged one had never come. Requests
	// whose method is not in Methods are not protected, so not verified
	// either. Default: none.
	Verify VerifyFunc

	// KeyOptional lets a protected request without an Idempotency-Key
	// header through untouched, for adopting keys gradually: next runs as
	// if the middleware were not there, outside any transaction (Tx and
	// Lease report false, so the handler opens its own, as before), nothing
	// is stored, and the store's Observer sees an idem.EventKeyless
	// (idemotel counts them in idem.keyless), so the share of clients
	// without keys can be watched fall before keys become required. A
	// request with a key is protected as usual, and a malformed key is
	// still refused with 400.
	KeyOptional bool

	// FormerScopes also answers from records stored under the scope form
	// of idem v0.0 (method, route with the ServeMux pattern's method,
	// principal last): a retry of a request first made before the upgrade
	// then gets the first attempt's answer (a replay, 422 or 409) instead
	// of being done again under the new scope; under WrapLease, a former
	// record whose lease ended (released, or its holder gone) is resumed
	// from its last step under its own scope. It costs one read per
	// protected request; turn it on for the upgrade and off once one
	// retention window has passed, when no such record is left. The read
	// is outside the transaction: while old and new versions run side by
	// side, a request that a v0.0 instance claims during it can still be
	// done twice, so finish a rolling upgrade before clients retry across
	// it, or drain first.
	FormerScopes bool

	// Unrouted accepts protected requests whose route is "": the handler
	// wrapped is deliberately one endpoint with no router in front, or a
	// whole mux whose targets may share one scope per principal and method
	// (the default fingerprint still tells them apart, so a key reused on
	// another target is a mismatch). Without it such a request gets 500
	// "route-missing" and an ERROR log: the usual cause is the middleware
	// installed before routing (around a ServeMux, or with a router's
	// top-level Use), where it would also store the router's 404 as the
	// answer of an unknown route. Wrap the handlers you register instead
	// (chi: r.With or a Group's Use; echo: idemecho; gin: idemgin).
	Unrouted bool

	// Fingerprint hashes what the request asks for; the same key with
	// another fingerprint gets 422. It gets the request, its route and the
	// whole body (r.Body must not be read). It must cover everything that
	// identifies the resource and the change: a key that fingerprints the
	// same on two resources replays the first one's answer for the second.
	// Build custom ones with idem.Hasher, for example to hash selected JSON
	// fields next to the path. Default: DefaultFingerprint (method, route,
	// host, path, query and body).
	//
	// When a middleware before this one parsed the form (ParseForm,
	// ParseMultipartForm, FormValue: a CSRF check, a method override) and
	// so drained r.Body, the handler sees the form in r.PostForm and
	// r.MultipartForm, and body is a stable encoding of that form instead:
	// "idemhttp form v1 sha256:" and the hex SHA-256 (idem.Hasher) of its
	// values and files, names sorted (files with their filename,
	// Content-Type and bytes). r.PostForm and r.MultipartForm hold the form
	// itself. A body that another middleware read and did not restore is
	// refused (500 "body-consumed") before Fingerprint is called.
	Fingerprint func(r *http.Request, route string, body []byte) idem.Fingerprint

	// MaxRequestBody is the largest request body accepted; a larger one gets
	// 413 before anything is claimed. Default: DefaultMaxRequestBody.
	MaxRequestBody int64

	// StoreHeader reports whether a response header (by its canonical name)
	// is stored and replayed. Hop-by-hop headers, trailers, Content-Length
	// and this package's headers are never stored, whatever it says.
	// Default: DefaultStoreHeader (everything but Date, Set-Cookie,
	// Authentication-Info and Proxy-Authentication-Info).
	StoreHeader func(name string) bool

	// RetryAfter is sent in Retry-After (rounded up to whole seconds) with
	// 409 and 503. Default: DefaultRetryAfter.
	RetryAfter time.Duration

	// Logger receives the errors behind 5xx answers and the requests refused
	// for a missing principal. Default: slog.Default().
	Logger *slog.Logger

	// ImplicitOK answers, stores and replays an empty 200 for a handler
	// that returns without calling WriteHeader or Write, as net/http
	// answers it. Without it such a handler has answered nothing, and
	// nothing is stored: its writes roll back (under WrapLease, the lease is
	// released and its recorded steps kept), the client gets 500
	// "no-response", and the error is logged. The usual cause is a
	// framework that renders the handler's returned error after the
	// middleware has finished (echo.WrapMiddleware, for one), where an
	// empty 200 would commit the work and be replayed to every retry. Set
	// it only for handlers that answer 200 by writing nothing; an explicit
	// WriteHeader(http.StatusOK) without a body is stored either way.
	ImplicitOK bool
}

// Middleware runs handlers inside idempotent transactions of one Store. It is
// safe for concurrent use; one Middleware may wrap many handlers.
type Middleware[TTx any] struct {
	store      *idem.Store[TTx]
	cfg        Config
	methods    map[string]bool
	retention  string
	retryAfter string
	maxBody    int
	// ownRoute: Config.Route was set, so the former scope's route is the
	// same as today's (see Config.FormerScopes).
	ownRoute bool
}

// New returns a Middleware on store. It fails, with an error wrapping
// idem.ErrInvalidConfig, for a nil store, a missing Principal, a method
// that is not an HTTP token, or a negative limit.
func New[TTx any](store *idem.Store[TTx], cfg Config) (*Middleware[TTx], error) {
	if store == nil {
		return nil, fmt.Errorf("idemhttp: %w: nil store", idem.ErrInvalidConfig)
	}
	if cfg.Principal == nil {
		return nil, fmt.Errorf("idemhttp: %w: Config.Principal is required: keys must be scoped to who sends them", idem.ErrInvalidConfig)
	}
	if cfg.KeyOptional && (cfg.Key != nil || cfg.Verify != nil) {
		return nil, fmt.Errorf("idemhttp: %w: Config.KeyOptional goes with the Idempotency-Key header only, not with Config.Key or Config.Verify (a request without a key would skip them)", idem.ErrInvalidConfig)
	}
	if cfg.Methods == nil {
		cfg.Methods = []string{http.MethodPost, http.MethodPatch}
	}
	methods := make(map[string]bool, len(cfg.Methods))
	for _, m := range cfg.Methods {
		if !isToken(m) {
			return nil, fmt.Errorf("idemhttp: %w: method %q is not an HTTP token", idem.ErrInvalidConfig, m)
		}
		methods[m] = true
	}
	ownRoute := cfg.Route != nil
	if !ownRoute {
		cfg.Route = DefaultRoute
	}
	if cfg.Fingerprint == nil {
		cfg.Fingerprint = DefaultFingerprint
	}
	switch {
	case cfg.MaxRequestBody < 0:
		return nil, fmt.Errorf("idemhttp: %w: MaxRequestBody %d is negative", idem.ErrInvalidConfig, cfg.MaxRequestBody)
	case cfg.MaxRequestBody == 0:
		cfg.MaxRequestBody = DefaultMaxRequestBody
	}
	if cfg.StoreHeader == nil {
		cfg.StoreHeader = DefaultStoreHeader
	}
	switch {
	case cfg.RetryAfter < 0:
		return nil, fmt.Errorf("idemhttp: %w: RetryAfter %v is negative", idem.ErrInvalidConfig, cfg.RetryAfter)
	case cfg.RetryAfter == 0:
		cfg.RetryAfter = DefaultRetryAfter
	}
	sc := store.Config()
	return &Middleware[TTx]{
		store:      store,
		cfg:        cfg,
		methods:    methods,
		retention:  strconv.FormatInt(int64(sc.Retention/time.Second), 10),
		retryAfter: strconv.FormatInt(int64((cfg.RetryAfter+time.Second-1)/time.Second), 10),
		maxBody:    sc.MaxBody,
		ownRoute:   ownRoute,
	}, nil
}

// Wrap returns next protected by the middleware: requests with a configured
// method need a key and run next inside the store's transaction; others go
// straight to next. Wrap the handlers you register on a ServeMux, not the
// ServeMux itself, so that DefaultRoute sees the pattern that matched.
//
// A request that already runs inside a Wrap of the same Store (the
// middleware installed on a group and again on its route, or by two
// Middlewares of that Store) goes straight to next, which runs once, in
// that outer run's transaction, when it carries the outer run's key or
// none. A nesting that cannot work is refused with 500
// "middleware-nested", logged, and nothing is stored: a request with
// another key (a handler that serves sub-requests through the router:
// their keys would never be recorded), Wrap inside WrapLease of the same
// Store (or the reverse), a Wrap of another Store, or a Wrap inside a
// function of the Store's own Do or DoLease.
func (m *Middleware[TTx]) Wrap(next http.Handler) http.Handler {
	return m.protect(next, false, m.serve)
}

// WrapLease is Wrap in lease mode (idem.Store.DoLease), for handlers that
// call something outside the database (a payment provider, another
// service): no transaction is held while the handler runs. The handler gets
// the lease with Lease, records a step after each external call (with that
// step's own database writes), and sends Lease.DownstreamKey(step) to the
// provider as its idempotency key. Its answer is stored when it returns;
// Fail, a panic, a status that is not stored (5xx, 408, 425, 429), or no
// answer at all (see Config.ImplicitOK) release the lease instead, so a
// retry resumes from the last step. Nested in a WrapLease of the same
// Store, it passes the request through, as Wrap does in Wrap. The
// answers are Wrap's: a replay, 422 for another request, 409 while the
// lease is held (Retry-After: until it ends), and 503 "lease-lost" when the
// handler outlived its lease and another attempt took the work over.
func (m *Middleware[TTx]) WrapLease(next http.Handler) http.Handler {
	return m.protect(next, true, m.serveLease)
}

func (m *Middleware[TTx]) protect(next http.Handler, leased bool, serve func(http.ResponseWriter, *http.Request, string, http.Handler)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !m.methods[r.Method] {
			next.ServeHTTP(w, r)
			return
		}
		switch inside, err := m.nesting(r, leased); {
		case err != nil:
			m.refuseNested(w, r, err)
			return
		case inside:
			next.ServeHTTP(w, r) // the run this request is in protects it
			return
		}
		route := m.cfg.Route(r)
		if route == "" && !m.cfg.Unrouted {
			m.unrouted(w, r)
			return
		}
		if m.cfg.KeyOptional && r.Header.Values(HeaderKey) == nil {
			m.store.Keyless(r.Context(), Scope(m.cfg.Principal(r), r.Method, route))
			next.ServeHTTP(w, r)
			return
		}
		serve(w, r, route, next)
	})
}

// unrouted refuses a protected request that has no route (see
// Config.Unrouted): 500 "route-missing", and an ERROR log naming the fix.
func (m *Middleware[TTx]) unrouted(w http.ResponseWriter, r *http.Request) {
	m.logger().LogAttrs(r.Context(), slog.LevelError, "idemhttp: refused a request with no route: the middleware runs before routing; wrap the handlers you register (chi: r.With or Group, echo: idemecho, gin: idemgin), or set Config.Unrouted if one scope per method is meant",
		slog.String("method", r.Method), slog.String("path", r.URL.Path))
	writeProblem(w, http.StatusInternalServerError, "route-missing",
		"The service is misconfigured: this endpoint's idempotency protection does not know its route. Nothing was done.")
}

// prepare reads what identifies a protected request: its key, body and
// principal. When one is missing or unusable it answers and reports false.
func (m *Middleware[TTx]) prepare(w http.ResponseWriter, r *http.Request, route string) (idem.Request, payload, bool) {
	w.Header().Set(HeaderRetention, m.retention)
	// The Idempotency-Key header is read before the body; a key of
	// Config.Key may be in the body, and Config.Verify comes first.
	bodyFirst := m.cfg.Key != nil || m.cfg.Verify != nil
	var key string
	if !bodyFirst {
		var ok bool
		if key, ok = m.requestKey(w, r, nil); !ok {
			return idem.Request{}, payload{}, false
		}
	}
	body, err := readPayload(w, r, m.cfg.MaxRequestBody)
	if err != nil {
		if errors.Is(err, errBodyConsumed) {
			m.bodyConsumed(w, r, err)
			return idem.Request{}, payload{}, false
		}
		if detail, ok := bodyTooLarge(err); ok {
			writeProblem(w, http.StatusRequestEntityTooLarge, "body-too-large", detail)
			return idem.Request{}, payload{}, false
		}
		writeProblem(w, http.StatusBadRequest, "body-unreadable", "The request body could not be read. Nothing was done.")
		return idem.Request{}, payload{}, false
	}
	if bodyFirst {
		if !m.verified(w, r, body.body) {
			return idem.Request{}, payload{}, false
		}
		var ok bool
		if key, ok = m.requestKey(w, r, body.body); !ok {
			return idem.Request{}, payload{}, false
		}
	}

	principal := m.cfg.Principal(r)
	if principal == "" && !m.cfg.AllowAnonymous {
		m.logger().LogAttrs(r.Context(), slog.LevelWarn, "idemhttp: refused a request without a principal; install the middleware after authentication, or set Config.AllowAnonymous for endpoints anonymous by design",
			slog.String("method", r.Method), slog.String("path", r.URL.Path))
		writeProblem(w, http.StatusForbidden, "principal-missing",
			"This request carries an Idempotency-Key but no authenticated caller to scope it to, so it was refused. Nothing was done.")
		return idem.Request{}, payload{}, false
	}
	return idem.Request{
		Scope:       Scope(principal, r.Method, route),
		Key:         key,
		Fingerprint: m.cfg.Fingerprint(r, route, body.body),
	}, body, true
}

// serve runs one protected request in one transaction (Wrap).
func (m *Middleware[TTx]) serve(w http.ResponseWriter, r *http.Request, route string, next http.Handler) {
	req, body, ok := m.prepare(w, r, route)
	if !ok {
		return
	}
	if req, ok = m.formerly(w, r, req, route, body.body, false); ok {
		return
	}
	var last *recorder // the answer of the handler's last run
	res, err := m.store.Do(r.Context(), req, func(ctx context.Context, tx TTx) (idem.Response, error) {
		var resp idem.Response
		var err error
		last, resp, err = m.run(ctx, r, body, next, &handlerRun{store: m.store, key: req.Key, tx: tx})
		return resp, err
	})
	m.answer(w, r, req, res, err, last)
}

// serveLease runs one protected request in lease mode (WrapLease).
func (m *Middleware[TTx]) serveLease(w http.ResponseWriter, r *http.Request, route string, next http.Handler) {
	req, body, ok := m.prepare(w, r, route)
	if !ok {
		return
	}
	if req, ok = m.formerly(w, r, req, route, body.body, true); ok {
		return
	}
	var last *recorder
	res, err := m.store.DoLease(r.Context(), req, func(ctx context.Context, l *idem.Lease[TTx]) (idem.Response, error) {
		var resp idem.Response
		var err error
		last, resp, err = m.run(ctx, r, body, next, &handlerRun{store: m.store, key: req.Key, lease: l})
		return resp, err
	})
	m.answer(w, r, req, res, err, last)
}

// run runs the handler once, on a fresh copy of the body (or of the form a
// middleware before this one parsed), with run in its request's context,
// and returns its buffered answer and what to store.
func (m *Middleware[TTx]) run(ctx context.Context, r *http.Request, p payload, next http.Handler, run *handlerRun) (*recorder, idem.Response, error) {
	rec := newRecorder(m.maxBody)
	// A clone per run: what a run changes in the request (a decoding
	// middleware between idem and the handler drops Content-Encoding,
	// a handler edits its form) must not reach the next run.
	hr := r.Clone(context.WithValue(ctx, runKey{}, run))
	if p.form { // r.Body stays as the form's parse left it
		files, err := p.runFiles()
		if err != nil {
			return rec, idem.Response{}, err
		}
		if files != nil {
			hr.MultipartForm.File = files
		}
	} else {
		body := p.body
		hr.Body = io.NopCloser(bytes.NewReader(body))
		hr.ContentLength = int64(len(body))
		hr.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	}
	next.ServeHTTP(rec, hr)
	if err := run.failure(); err != nil {
		return rec, idem.Response{}, &handlerError{err: err, leased: run.lease != nil}
	}
	if !rec.answered() && !m.cfg.ImplicitOK {
		return rec, idem.Response{}, &handlerError{err: errNoResponse, leased: run.lease != nil}
	}
	resp, err := rec.finish()
	if err != nil {
		return rec, idem.Response{}, err
	}
	resp.Header = m.storedHeader(resp.Header)
	return rec, resp, run.outcome()
}

// answer writes what Do or DoLease decided.
func (m *Middleware[TTx]) answer(w http.ResponseWriter, r *http.Request, req idem.Request, res idem.Result, err error, last *recorder) {
	if err != nil {
		m.failed(w, r, req, err)
		return
	}
	switch res.Outcome {
	case idem.Won:
		// The handler's full answer: the stored subset plus what is never
		// stored (Set-Cookie, for instance). A 5xx was rolled back.
		if res.NotStored != nil {
			m.logger().LogAttrs(r.Context(), slog.LevelWarn, "idemhttp: handler answered after a statement of its transaction failed and aborted it: answer sent, not stored; rolled back, a retry runs the handler again (use a savepoint or INSERT ... ON CONFLICT to keep the transaction usable)",
				slog.String("scope", req.Scope), slog.String("key", req.Key), slog.Int("status", last.status), slog.Any("error", res.NotStored))
		}
		writeResponse(w, last.status, last.sent, last.body.Bytes(), last.trailer())
	case idem.Replay:
		w.Header().Set(HeaderReplayed, "true")
		// Trailers are not stored: a replay has none.
		writeResponse(w, res.Response.Status, res.Response.Header, res.Response.Body, nil)
	case idem.Mismatch:
		writeProblem(w, http.StatusUnprocessableEntity, "key-mismatch",
			"This Idempotency-Key was already used with a different request (another resource, query or body). Use a new key for a new operation.")
	case idem.InFlight:
		w.Header().Set("Retry-After", m.retryAfterFor(res.Record))
		detail := "A request with this Idempotency-Key is still in progress. Retry later with the same key."
		code := "in-flight"
		switch {
		case res.Busy && res.Record.Key == "":
			// SQLite's write lock: another request may hold this key, or
			// none does; the wait was for the database, not the key.
			code = "database-busy"
			detail = "The database was busy with other writes past the wait bound, so whether another request holds this Idempotency-Key is not known. Nothing was done. Retry soon with the same key."
		case res.Record.Key == "":
			detail = "The request could not claim its Idempotency-Key in time: another request holds it, or the database is busy. Retry later with the same key."
		}
		writeProblem(w, http.StatusConflict, code, detail)
	default:
		m.failed(w, r, req, fmt.Errorf("idemhttp: unexpected outcome %v", res.Outcome))
	}
}

// retryAfterFor is the Retry-After of a 409: Config.RetryAfter, or, for a
// key held by a lease, the seconds until the lease ends (rounded up, at
// most a minute), when it may be taken over.
func (m *Middleware[TTx]) retryAfterFor(rec idem.Record) string {
	if rec.LeaseUntil.IsZero() {
		return m.retryAfter
	}
	left := time.Until(rec.LeaseUntil)
	secs := min(max(int64((left+time.Second-1)/time.Second), 1), 60)
	return strconv.FormatInt(secs, 10)
}

// failed answers an error from Do: nothing was stored, or (ErrCommitUnknown)
// it is not known whether it was.
func (m *Middleware[TTx]) failed(w http.ResponseWriter, r *http.Request, req idem.Request, err error) {
	log := func(msg string) {
		m.logger().LogAttrs(r.Context(), slog.LevelError, "idemhttp: "+msg,
			slog.String("scope", req.Scope), slog.String("key", req.Key), slog.Any("error", err))
	}
	var (
		herr  *handlerError
		ended *idem.TxEndedError
	)
	switch {
	case errors.Is(err, idem.ErrTooLarge):
		log("response too large to store; rolled back")
		writeProblem(w, http.StatusInternalServerError, "response-too-large",
			"The response was too large to store for replay, so the operation was rolled back. Retrying will not help.")
	case errors.Is(err, idem.ErrWorkBegan):
		log("handler called NotAnOutcome after recording a step: its work began; lease released, nothing stored")
		writeProblem(w, http.StatusInternalServerError, "handler-failed",
			"The operation failed. What it completed is kept: retrying with the same Idempotency-Key resumes it.")
	case errors.Is(err, idem.ErrInvalidResponse):
		log("handler wrote an invalid status; rolled back")
		writeProblem(w, http.StatusInternalServerError, "handler-failed", "The operation failed and was rolled back.")
	case errors.Is(err, idem.ErrLeaseLost):
		log("lease lost: another attempt took the work over")
		w.Header().Set("Retry-After", m.retryAfter)
		writeProblem(w, http.StatusServiceUnavailable, "lease-lost",
			"The operation outlived its lease and another attempt took it over. Retry with the same Idempotency-Key to get its result.")
	case errors.Is(err, idem.ErrCommitUnknown):
		log("commit outcome unknown")
		w.Header().Set("Retry-After", m.retryAfter)
		writeProblem(w, http.StatusServiceUnavailable, "commit-unknown",
			"The database connection was lost while committing, so it is not known whether the operation took effect. Retry with the same Idempotency-Key: you will get its result, or it will be done once.")
	case errors.Is(err, idem.ErrRetriesExhausted):
		log("transaction kept failing with retryable errors")
		w.Header().Set("Retry-After", m.retryAfter)
		writeProblem(w, http.StatusServiceUnavailable, "store-unavailable",
			"The operation conflicted with concurrent ones and was rolled back. Retry with the same Idempotency-Key.")
	case errors.Is(err, idem.ErrTxAborted) && !errors.As(err, &herr):
		log("handler answered success after a statement of its transaction failed and aborted it; rolled back")
		writeProblem(w, http.StatusInternalServerError, "handler-failed", "The operation failed and was rolled back. Nothing was stored.")
	case errors.As(err, &ended):
		log("handler ended the transaction itself")
		detail := "The operation failed: its transaction was ended before the response could be stored, and it was rolled back. Retrying with the same Idempotency-Key does the operation."
		if ended.ClaimCommitted || ended.Unknown {
			w.Header().Set("Retry-After", m.retryAfter)
			detail = "The operation may have taken effect, but its response could not be stored. Until this Idempotency-Key expires, requests with it get 409; contact the service before making a new key for the same operation."
		}
		writeProblem(w, http.StatusInternalServerError, "transaction-ended", detail)
	case errors.Is(err, errNested):
		log("middleware nested on one route; nothing done, nothing stored")
		writeNestedProblem(w)
	case errors.As(err, &herr) && errors.Is(herr.err, errNoResponse) && herr.leased:
		log("handler returned without writing a response; lease released, nothing stored (set Config.ImplicitOK if it means an empty 200)")
		writeProblem(w, http.StatusInternalServerError, "no-response",
			"The operation ended without an answer, so none was stored. What it completed is kept: retrying with the same Idempotency-Key resumes it.")
	case errors.As(err, &herr) && errors.Is(herr.err, errNoResponse):
		log("handler returned without writing a response; rolled back (set Config.ImplicitOK if it means an empty 200)")
		writeProblem(w, http.StatusInternalServerError, "no-response",
			"The operation ended without an answer, so it was rolled back and nothing was stored. Retrying with the same Idempotency-Key runs it again.")
	case errors.As(err, &herr) && herr.leased:
		log("handler failed; lease released")
		w.Header().Set("Retry-After", m.retryAfter)
		writeProblem(w, http.StatusServiceUnavailable, "handler-failed",
			"The operation did not finish. What it completed is kept: retry with the same Idempotency-Key to resume it.")
	case errors.As(err, &herr):
		log("handler failed; rolled back")
		writeProblem(w, http.StatusInternalServerError, "handler-failed", "The operation failed and was rolled back. Nothing was stored.")
	default:
		if r.Context().Err() == nil {
			log("store failed; nothing stored")
		}
		w.Header().Set("Retry-After", m.retryAfter)
		writeProblem(w, http.StatusServiceUnavailable, "store-unavailable",
			"The operation could not be recorded and was rolled back. Retry with the same Idempotency-Key.")
	}
}

func (m *Middleware[TTx]) logger() *slog.Logger {
	if m.cfg.Logger != nil {
		return m.cfg.Logger
	}
	return slog.Default()
}

// readBody reads the whole body, at most limit bytes.
func readBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	if r.Body == nil || r.Body == http.NoBody {
		return []byte{}, nil
	}
	if r.ContentLength > limit {
		return nil, &http.MaxBytesError{Limit: limit}
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err != nil {
		return nil, fmt.Errorf("idemhttp: read request body: %w", err)
	}
	return body, nil
}

// errNoResponse is the failure of a handler that returned without calling
// WriteHeader or Write (see Config.ImplicitOK).
var errNoResponse = errors.New("returned without writing a response (no WriteHeader, no Write)")

// handlerError is an error the handler reported with Fail, or
// errNoResponse; leased when it
// ran under WrapLease, where a failure releases the lease for a retry to
// resume.
type handlerError struct {
	err    error
	leased bool
}

func (e *handlerError) Error() string { return "idemhttp: handler failed: " + e.err.Error() }

// Unwrap returns the handler's error, unless it matches
// idem.ErrNotAnOutcome: a failure the handler reported with Fail is never
// taken for an answer that is not an outcome (see NotAnOutcome), whatever
// it wraps.
func (e *handlerError) Unwrap() error {
	if errors.Is(e.err, idem.ErrNotAnOutcome) {
		return nil
	}
	return e.err
}

// isToken reports whether s is an RFC 9110 token, as a method must be.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case bytes.IndexByte([]byte("!#$%&'*+-.^_`|~"), c) >= 0:
		default:
			return false
		}
	}
	return true
}
