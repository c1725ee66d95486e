// Package idemotel reports what an idem Store does to OpenTelemetry:
// metrics for claims by outcome, the time losers waited for a held key,
// retries by cause, commits of unknown outcome, stored body sizes, purges,
// takeovers and RunRecovery's recoveries; a span around every Store.Do and,
// with Middleware, around idemhttp's handling of a request, each with the
// outcome as an attribute.
//
// idem's core does not import OpenTelemetry: it calls a small hook,
// idem.Observer, which this package implements. A service that does not
// use OpenTelemetry pays nothing for it, not even a module in its graph.
//
//	obs, err := idemotel.New() // the global MeterProvider and TracerProvider
//	store, err := idem.New(driver, idem.Config{Observer: obs})
//	mux.Handle("POST /orders", obs.Middleware(mw.Wrap(createOrder)))
//
// # Metrics
//
// The meter is named after this module (ScopeName). Every metric carries
// idem.table; units follow the OpenTelemetry conventions.
//
//	name                          instrument  unit        attributes
//	idem.claims                   counter     {claim}     idem.outcome (won, replay, mismatch, in-flight), idem.read_first, idem.lease
//	idem.claim.wait.duration      histogram   s           idem.outcome (replay, in-flight), idem.lease: how long a loser's claim took
//	idem.do.duration              histogram   s           idem.outcome, error.type
//	idem.retries                  counter     {retry}     idem.retry.cause (serialization, deadlock, unavailable)
//	idem.commit.unknown           counter     {commit}
//	idem.response.body.size       histogram   By          the bodies Complete stored, idem.lease
//	idem.purge.deleted            counter     {record}
//	idem.purge.duration           histogram   s           error.type when a purge stopped early
//	idem.takeovers                counter     {takeover}  ended leases taken over, idem.released
//	idem.keyless                  counter     {request}   keyless requests let through (optional-key mode)
//	idem.recoveries               counter     {lease}     abandoned leases RunRecovery dealt with, idem.recovery (completed, failed, taken, unknown-scope)
//	idem.recovery.duration        histogram   s           how long a lease RunRecovery took over took to resume and complete, idem.recovery
//	idem.recovery.round.duration  histogram   s           each RunRecovery round, error.type when it stopped early
//
// # Spans
//
// "idem.Do" spans every Store.Do call, with idem.table, idem.outcome and
// idem.committed, and events for its retries ("idem.retry", with the cause)
// and a commit of unknown outcome ("idem.commit_unknown"); an error sets
// the span's status. "idem.http" (Middleware) spans idemhttp's handling of
// a request, with idem.outcome (or "none" when the request never reached
// the store: a missing key, a body too large) and
// http.response.status_code. "idem.recovery" spans each abandoned lease
// idem.RunRecovery takes on (the takeover, the resumed function, the
// completion), with idem.recovery and, for a failure, error.type and the
// span's status. Scopes and keys are not recorded unless WithKeys is
// given: a scope holds the caller's identity.
package idemotel

import (
	"context"
	"errors"
	"net/http"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemkit/idem"
)

// ScopeName is the instrumentation scope of the meter and the tracer: this
// module's path.
const ScopeName = "github.com/idemkit/idem/idemotel"

// Attribute keys.
const (
	AttrTable     = attribute.Key("idem.table")
	AttrOutcome   = attribute.Key("idem.outcome")
	AttrReadFirst = attribute.Key("idem.read_first")
	// AttrLease marks what lease mode (Store.Lease, DoLease) did.
	AttrLease = attribute.Key("idem.lease")
	// AttrReleased marks, on idem.takeovers, a lease its holder released
	// (Lease.Release: it failed and handed the work on) rather than one
	// that lapsed (the holder crashed or hung).
	AttrReleased   = attribute.Key("idem.released")
	AttrRetryCause = attribute.Key("idem.retry.cause")
	// AttrRecovery is what RunRecovery did with an abandoned lease
	// (idem.RecoveryOutcome's name).
	AttrRecovery   = attribute.Key("idem.recovery")
	AttrCommitted  = attribute.Key("idem.committed")
	AttrScope      = attribute.Key("idem.scope")
	AttrKey        = attribute.Key("idem.key")
	attrErrorType  = attribute.Key("error.type")
	attrHTTPStatus = attribute.Key("http.response.status_code")
)

// Option configures an Observer.
type Option func(*options)

type options struct {
	meters  metric.MeterProvider
	tracers trace.TracerProvider
	keys    bool
}

// WithMeterProvider takes the meter from mp instead of the global
// MeterProvider.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(o *options) { o.meters = mp }
}

// WithTracerProvider takes the tracer from tp instead of the global
// TracerProvider.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(o *options) { o.tracers = tp }
}

// WithKeys records each request's scope and key on its spans (idem.scope,
// idem.key). Off by default: a scope holds who is asking, and keys are
// many distinct values.
func WithKeys() Option {
	return func(o *options) { o.keys = true }
}

// Observer is an idem.Observer (and idem.DoObserver) that records
// OpenTelemetry metrics and spans. One Observer may serve many stores; it
// is safe for concurrent use.
type Observer struct {
	tracer trace.Tracer
	keys   bool

	claims        metric.Int64Counter
	claimWait     metric.Float64Histogram
	doDuration    metric.Float64Histogram
	retries       metric.Int64Counter
	commitUnknown metric.Int64Counter
	bodySize      metric.Int64Histogram
	purgeDeleted  metric.Int64Counter
	purgeDuration metric.Float64Histogram
	takeovers     metric.Int64Counter
	keyless       metric.Int64Counter
	recoveries    metric.Int64Counter
	recoveryTime  metric.Float64Histogram
	roundTime     metric.Float64Histogram
}

var (
	_ idem.Observer         = (*Observer)(nil)
	_ idem.DoObserver       = (*Observer)(nil)
	_ idem.RecoveryObserver = (*Observer)(nil)
)

// durationBuckets are the histogram boundaries of durations in seconds,
// from a millisecond to a minute.
var durationBuckets = []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 2.5, 5, 7.5, 10, 30, 60}

// sizeBuckets are the histogram boundaries of body sizes in bytes, up to
// idem's default limit of 1 MiB.
var sizeBuckets = []float64{0, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576}

// New makes an Observer on the global providers, or those the options name.
func New(opts ...Option) (*Observer, error) {
	o := options{}
	for _, opt := range opts {
		opt(&o)
	}
	if o.meters == nil {
		o.meters = otel.GetMeterProvider()
	}
	if o.tracers == nil {
		o.tracers = otel.GetTracerProvider()
	}
	m := o.meters.Meter(ScopeName)
	obs := &Observer{tracer: o.tracers.Tracer(ScopeName), keys: o.keys}
	var errs []error
	add := func(err error) { errs = append(errs, err) }
	var err error
	obs.claims, err = m.Int64Counter("idem.claims", metric.WithUnit("{claim}"),
		metric.WithDescription("Claims decided, by outcome: won, replay, mismatch, in-flight."))
	add(err)
	obs.claimWait, err = m.Float64Histogram("idem.claim.wait.duration", metric.WithUnit("s"),
		metric.WithDescription("How long a claim that lost (replay, in-flight) took, waiting for the key's holder."),
		metric.WithExplicitBucketBoundaries(durationBuckets...))
	add(err)
	obs.doDuration, err = m.Float64Histogram("idem.do.duration", metric.WithUnit("s"),
		metric.WithDescription("How long Store.Do took, by outcome."),
		metric.WithExplicitBucketBoundaries(durationBuckets...))
	add(err)
	obs.retries, err = m.Int64Counter("idem.retries", metric.WithUnit("{retry}"),
		metric.WithDescription("Transactions run again after a retryable error, by cause."))
	add(err)
	obs.commitUnknown, err = m.Int64Counter("idem.commit.unknown", metric.WithUnit("{commit}"),
		metric.WithDescription("Commits whose outcome is unknown: the connection broke during COMMIT."))
	add(err)
	obs.bodySize, err = m.Int64Histogram("idem.response.body.size", metric.WithUnit("By"),
		metric.WithDescription("Sizes of the response bodies stored for replay."),
		metric.WithExplicitBucketBoundaries(sizeBuckets...))
	add(err)
	obs.purgeDeleted, err = m.Int64Counter("idem.purge.deleted", metric.WithUnit("{record}"),
		metric.WithDescription("Expired records deleted by Purge."))
	add(err)
	obs.purgeDuration, err = m.Float64Histogram("idem.purge.duration", metric.WithUnit("s"),
		metric.WithDescription("How long each Purge call ran."),
		metric.WithExplicitBucketBoundaries(durationBuckets...))
	add(err)
	obs.takeovers, err = m.Int64Counter("idem.takeovers", metric.WithUnit("{takeover}"),
		metric.WithDescription("Pending records taken over after their holder's lease ran out."))
	add(err)
	obs.keyless, err = m.Int64Counter("idem.keyless", metric.WithUnit("{request}"),
		metric.WithDescription("Requests without a key let through unprotected in optional-key mode."))
	add(err)
	obs.recoveries, err = m.Int64Counter("idem.recoveries", metric.WithUnit("{lease}"),
		metric.WithDescription("Abandoned leases RunRecovery dealt with, by outcome: completed, failed, taken, unknown-scope."))
	add(err)
	obs.recoveryTime, err = m.Float64Histogram("idem.recovery.duration", metric.WithUnit("s"),
		metric.WithDescription("How long a lease RunRecovery took over took to resume and complete, by outcome."),
		metric.WithExplicitBucketBoundaries(durationBuckets...))
	add(err)
	obs.roundTime, err = m.Float64Histogram("idem.recovery.round.duration", metric.WithUnit("s"),
		metric.WithDescription("How long each round of RunRecovery ran."),
		metric.WithExplicitBucketBoundaries(durationBuckets...))
	add(err)
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return obs, nil
}

// Observe records one event.
func (o *Observer) Observe(ctx context.Context, e idem.Event) {
	table := AttrTable.String(e.Table)
	switch e.Kind {
	case idem.EventClaim:
		outcome, lease := AttrOutcome.String(e.Outcome.String()), AttrLease.Bool(e.Lease)
		o.claims.Add(ctx, 1, metric.WithAttributes(table, outcome, AttrReadFirst.Bool(e.ReadFirst), lease))
		if !e.ReadFirst && (e.Outcome == idem.Replay || e.Outcome == idem.InFlight) {
			o.claimWait.Record(ctx, e.Wait.Seconds(), metric.WithAttributes(table, outcome, lease))
		}
	case idem.EventRetry:
		o.retries.Add(ctx, 1, metric.WithAttributes(table, AttrRetryCause.String(e.Cause)))
		if span := trace.SpanFromContext(ctx); span.IsRecording() {
			span.AddEvent("idem.retry", trace.WithAttributes(AttrRetryCause.String(e.Cause), attribute.Int("idem.attempt", e.Attempt)))
		}
	case idem.EventCommitUnknown:
		o.commitUnknown.Add(ctx, 1, metric.WithAttributes(table))
		if span := trace.SpanFromContext(ctx); span.IsRecording() {
			span.AddEvent("idem.commit_unknown")
		}
	case idem.EventStored:
		o.bodySize.Record(ctx, int64(e.BodyBytes), metric.WithAttributes(table, AttrLease.Bool(e.Lease)))
	case idem.EventPurgeBatch:
		o.purgeDeleted.Add(ctx, e.Rows, metric.WithAttributes(table))
	case idem.EventPurge:
		attrs := []attribute.KeyValue{table}
		if e.Err != nil {
			attrs = append(attrs, attrErrorType.String(errorType(e.Err)))
		}
		o.purgeDuration.Record(ctx, e.Duration.Seconds(), metric.WithAttributes(attrs...))
	case idem.EventTakeover:
		o.takeovers.Add(ctx, 1, metric.WithAttributes(table, AttrReleased.Bool(e.Released)))
	case idem.EventKeyless:
		o.keyless.Add(ctx, 1, metric.WithAttributes(table))
	case idem.EventRecovery:
		outcome := AttrRecovery.String(e.Recovery.String())
		o.recoveries.Add(ctx, 1, metric.WithAttributes(table, outcome))
		if e.Token != 0 { // taken over: its function ran
			o.recoveryTime.Record(ctx, e.Duration.Seconds(), metric.WithAttributes(table, outcome))
		}
	case idem.EventRecoveryRound:
		attrs := []attribute.KeyValue{table}
		if e.Err != nil {
			attrs = append(attrs, attrErrorType.String(errorType(e.Err)))
		}
		o.roundTime.Record(ctx, e.Duration.Seconds(), metric.WithAttributes(attrs...))
	}
}

// StartDo starts the "idem.Do" span; done ends it with the outcome and
// records idem.do.duration.
func (o *Observer) StartDo(ctx context.Context, req idem.Request) (context.Context, func(idem.Result, error)) {
	started := time.Now()
	var attrs []attribute.KeyValue
	if o.keys {
		attrs = append(attrs, AttrScope.String(req.Scope), AttrKey.String(req.Key))
	}
	ctx, span := o.tracer.Start(ctx, "idem.Do", trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(attrs...))
	holder, _ := ctx.Value(outcomeKey{}).(*outcomeHolder)
	return ctx, func(res idem.Result, err error) {
		outcome := outcomeName(res, err)
		if holder != nil {
			holder.outcome = outcome
		}
		attrs := []attribute.KeyValue{AttrOutcome.String(outcome)}
		if err != nil {
			attrs = append(attrs, attrErrorType.String(errorType(err)))
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		o.doDuration.Record(ctx, time.Since(started).Seconds(), metric.WithAttributes(attrs...))
		span.SetAttributes(AttrOutcome.String(outcome), AttrCommitted.Bool(res.Committed))
		span.End()
	}
}

// StartRecovery starts the "idem.recovery" span around one abandoned
// lease RunRecovery takes on; done ends it with the outcome (idem.recovery)
// and, for a failure, the error as the span's status.
func (o *Observer) StartRecovery(ctx context.Context, rec idem.Record) (context.Context, func(idem.RecoveryOutcome, error)) {
	var attrs []attribute.KeyValue
	if o.keys {
		attrs = append(attrs, AttrScope.String(rec.Scope), AttrKey.String(rec.Key))
	}
	ctx, span := o.tracer.Start(ctx, "idem.recovery", trace.WithSpanKind(trace.SpanKindInternal), trace.WithAttributes(attrs...))
	return ctx, func(outcome idem.RecoveryOutcome, err error) {
		span.SetAttributes(AttrRecovery.String(outcome.String()))
		if err != nil {
			span.SetAttributes(attrErrorType.String(errorType(err)))
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
	}
}

// outcomeName is Do's outcome, "error" when it failed.
func outcomeName(res idem.Result, err error) string {
	if err != nil {
		return "error"
	}
	return res.Outcome.String()
}

// errorType names an error for error.type: the idem meaning it matches, or
// "other".
func errorType(err error) string {
	for _, m := range []struct {
		err  error
		name string
	}{
		{context.Canceled, "canceled"},
		{context.DeadlineExceeded, "deadline_exceeded"},
		{idem.ErrCommitUnknown, "commit_unknown"},
		{idem.ErrRetriesExhausted, "retries_exhausted"},
		{idem.ErrUnavailable, "unavailable"},
		{idem.ErrLockTimeout, "lock_timeout"},
		{idem.ErrTooLarge, "too_large"},
	} {
		if errors.Is(err, m.err) {
			return m.name
		}
	}
	var ended *idem.TxEndedError
	if errors.As(err, &ended) {
		return "tx_ended"
	}
	return "other"
}

// outcomeKey finds the Middleware's outcomeHolder in a request's context.
type outcomeKey struct{}

// outcomeHolder carries Do's outcome from the Do span back to the HTTP
// span around it.
type outcomeHolder struct{ outcome string }

// Middleware spans next ("idem.http") with the outcome of the Store.Do it
// ran (through an idemhttp middleware inside next) and the response status.
// Put it around idemhttp's Wrap, inside the server span of otelhttp or
// your router:
//
//	mux.Handle("POST /orders", obs.Middleware(mw.Wrap(createOrder)))
func (o *Observer) Middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		holder := &outcomeHolder{outcome: "none"}
		ctx, span := o.tracer.Start(context.WithValue(r.Context(), outcomeKey{}, holder), "idem.http",
			trace.WithSpanKind(trace.SpanKindInternal))
		defer span.End()
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		next.ServeHTTP(sw, r.WithContext(ctx))
		span.SetAttributes(AttrOutcome.String(holder.outcome), attrHTTPStatus.Int(sw.status))
		if sw.status >= 500 {
			span.SetStatus(codes.Error, http.StatusText(sw.status))
		}
	})
}

// statusWriter notes the status a handler wrote.
type statusWriter struct {
	http.ResponseWriter
	status int
	wrote  bool
}

func (w *statusWriter) WriteHeader(status int) {
	if !w.wrote {
		w.status, w.wrote = status, true
	}
	w.ResponseWriter.WriteHeader(status)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	w.wrote = true
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the writer underneath.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
