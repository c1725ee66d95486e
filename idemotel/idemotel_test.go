package idemotel_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/dialect"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/idemotel"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/sqlite"
)

// telemetry is an Observer on in-memory SDK readers.
type telemetry struct {
	obs    *idemotel.Observer
	reader *sdkmetric.ManualReader
	spans  *tracetest.SpanRecorder
}

func newTelemetry(t *testing.T) *telemetry {
	t.Helper()
	reader := sdkmetric.NewManualReader()
	spans := tracetest.NewSpanRecorder()
	obs, err := idemotel.New(
		idemotel.WithMeterProvider(sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))),
		idemotel.WithTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))))
	if err != nil {
		t.Fatal(err)
	}
	return &telemetry{obs: obs, reader: reader, spans: spans}
}

// metrics collects and indexes the metrics by name.
func (tm *telemetry) metrics(t *testing.T) map[string]metricdata.Metrics {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := tm.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]metricdata.Metrics{}
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != idemotel.ScopeName {
			t.Errorf("meter scope %q, want %q", sm.Scope.Name, idemotel.ScopeName)
		}
		for _, m := range sm.Metrics {
			out[m.Name] = m
		}
	}
	return out
}

// sum adds a counter's points whose attributes include every one of want.
func sum(t *testing.T, m metricdata.Metrics, want ...attribute.KeyValue) int64 {
	t.Helper()
	s, ok := m.Data.(metricdata.Sum[int64])
	if !ok {
		t.Fatalf("%s is %T, want an int64 sum", m.Name, m.Data)
	}
	var n int64
	for _, p := range s.DataPoints {
		if has(p.Attributes, want) {
			n += p.Value
		}
	}
	return n
}

// histogram returns the count and sum of a histogram's points matching want.
func histogram[N int64 | float64](t *testing.T, m metricdata.Metrics, want ...attribute.KeyValue) (uint64, N) {
	t.Helper()
	h, ok := m.Data.(metricdata.Histogram[N])
	if !ok {
		t.Fatalf("%s is %T", m.Name, m.Data)
	}
	var (
		count uint64
		total N
	)
	for _, p := range h.DataPoints {
		if has(p.Attributes, want) {
			count += p.Count
			total += p.Sum
		}
	}
	return count, total
}

func has(set attribute.Set, want []attribute.KeyValue) bool {
	for _, kv := range want {
		if v, ok := set.Value(kv.Key); !ok || v != kv.Value {
			return false
		}
	}
	return true
}

func openStore(t *testing.T, cfg idem.Config) (*idem.Store[*sql.Tx], *sqlite.Driver) {
	t.Helper()
	lite := idemtest.NewSQLite(t, cfg)
	return lite.Store, lite.Driver
}

func request(key, body string) idem.Request {
	return idem.Request{Scope: "tenant-1 POST /orders", Key: key, Fingerprint: idem.FingerprintRequest("POST", "/orders", []byte(body))}
}

func respond(body string) idem.Func[*sql.Tx] {
	return func(context.Context, *sql.Tx) (idem.Response, error) {
		return idem.Response{Status: 201, Body: []byte(body)}, nil
	}
}

// lostCommits makes every COMMIT's outcome unknown (after rolling back).
type lostCommits struct{ *sqlite.Driver }

func (d lostCommits) Begin(ctx context.Context, o dialect.BeginOptions) (dialect.Tx[*sql.Tx], error) {
	tx, err := d.Driver.Begin(ctx, o)
	if err != nil {
		return nil, err
	}
	return lostCommitTx{tx}, nil
}

type lostCommitTx struct{ dialect.Tx[*sql.Tx] }

func (t lostCommitTx) Commit(ctx context.Context) error {
	_ = t.Rollback(ctx)
	return dialect.Classified(dialect.ErrCommitUnknown, errors.New("connection reset during COMMIT"))
}

// TestMetricsAndSpans: the metrics and spans count exactly what the test
// did.
func TestMetricsAndSpans(t *testing.T) {
	ctx := context.Background()
	tm := newTelemetry(t)
	clock := time.Now().Add(-48 * time.Hour)
	store, d := openStore(t, idem.Config{Observer: tm.obs, WaitBound: 50 * time.Millisecond,
		Clock: func() time.Time { return clock }})

	// 3 expired records, purged later.
	for _, k := range []string{"old-1", "old-2", "old-3"} {
		if _, err := store.Do(ctx, request(k, "x"), respond("old")); err != nil {
			t.Fatal(err)
		}
	}
	clock = time.Now()
	// Won twice (bodies of 7 and 2 bytes), replayed twice, one mismatch.
	steps := []struct {
		key, body string
		want      idem.Outcome
	}{
		{"k1", "a", idem.Won}, {"k2", "b", idem.Won}, {"k1", "a", idem.Replay}, {"k2", "b", idem.Replay}, {"k1", "other", idem.Mismatch},
	}
	bodies := map[string]string{"k1": "created", "k2": "ok"}
	for _, s := range steps {
		res, err := store.Do(ctx, request(s.key, s.body), respond(bodies[s.key]))
		if err != nil || res.Outcome != s.want {
			t.Fatalf("Do %s: %v, %v; want %v", s.key, res.Outcome, err, s.want)
		}
	}
	// In flight: another transaction holds SQLite's write lock past the
	// wait bound.
	held, err := d.Begin(ctx, dialect.BeginOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := store.Do(ctx, request("k3", "c"), respond("c")); err != nil || res.Outcome != idem.InFlight {
		t.Fatalf("Do while the database is held: %v, %v; want in-flight", res.Outcome, err)
	}
	held.Rollback(ctx)
	// One serialization failure, then success: one retry.
	failed := false
	if _, err := store.Do(ctx, request("k4", "d"), func(context.Context, *sql.Tx) (idem.Response, error) {
		if !failed {
			failed = true
			return idem.Response{}, dialect.Classified(dialect.ErrSerialization, errors.New("could not serialize"))
		}
		return idem.Response{Status: 201, Body: []byte("fine")}, nil
	}); err != nil {
		t.Fatal(err)
	}
	// A commit whose outcome is unknown.
	lost, err := idem.New[*sql.Tx](lostCommits{d}, idem.Config{Observer: tm.obs, Clock: func() time.Time { return clock }})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lost.Do(ctx, request("k5", "e"), respond("lost")); !errors.Is(err, idem.ErrCommitUnknown) {
		t.Fatalf("Do with a lost commit: %v", err)
	}
	if res, err := store.Purge(ctx); err != nil || res.Deleted != 3 {
		t.Fatalf("Purge: %+v, %v", res, err)
	}

	m := tm.metrics(t)
	table := idemotel.AttrTable.String(idem.DefaultTable)
	outcome := func(o idem.Outcome) attribute.KeyValue { return idemotel.AttrOutcome.String(o.String()) }
	// Claims: 3 old + 2 won + k4 twice + k5 = 8 won (k4's first claim was
	// rolled back by its retry, and claimed again).
	for o, want := range map[idem.Outcome]int64{idem.Won: 8, idem.Replay: 2, idem.Mismatch: 1, idem.InFlight: 1} {
		if got := sum(t, m["idem.claims"], table, outcome(o)); got != want {
			t.Errorf("idem.claims{outcome=%v} = %d, want %d", o, got, want)
		}
	}
	if n, total := histogram[float64](t, m["idem.claim.wait.duration"], outcome(idem.InFlight)); n != 1 || total < 0.04 {
		t.Errorf("idem.claim.wait.duration{in-flight}: %d points, sum %vs; want 1 of about the 50ms wait bound", n, total)
	}
	if n, _ := histogram[float64](t, m["idem.claim.wait.duration"], outcome(idem.Replay)); n != 2 {
		t.Errorf("idem.claim.wait.duration{replay}: %d points, want 2", n)
	}
	if got := sum(t, m["idem.retries"], table, idemotel.AttrRetryCause.String("serialization")); got != 1 {
		t.Errorf("idem.retries{serialization} = %d, want 1", got)
	}
	if got := sum(t, m["idem.commit.unknown"], table); got != 1 {
		t.Errorf("idem.commit.unknown = %d, want 1", got)
	}
	// Stored: 3 x "old", "created", "ok", "fine", and k5's "lost" (stored,
	// then its commit was lost).
	if n, total := histogram[int64](t, m["idem.response.body.size"], table); n != 7 || total != 3*3+7+2+4+4 {
		t.Errorf("idem.response.body.size: %d bodies, %d bytes; want 7, 26", n, total)
	}
	if got := sum(t, m["idem.purge.deleted"], table); got != 3 {
		t.Errorf("idem.purge.deleted = %d, want 3", got)
	}
	if n, _ := histogram[float64](t, m["idem.purge.duration"], table); n != 1 {
		t.Errorf("idem.purge.duration: %d points, want 1", n)
	}
	if n, _ := histogram[float64](t, m["idem.do.duration"], idemotel.AttrOutcome.String("error")); n != 1 {
		t.Errorf("idem.do.duration{error}: %d, want 1 (the lost commit)", n)
	}
	for name, unit := range map[string]string{"idem.claims": "{claim}", "idem.claim.wait.duration": "s", "idem.response.body.size": "By",
		"idem.retries": "{retry}", "idem.purge.deleted": "{record}", "idem.purge.duration": "s", "idem.commit.unknown": "{commit}"} {
		if m[name].Unit != unit {
			t.Errorf("%s unit %q, want %q", name, m[name].Unit, unit)
		}
	}

	// Spans: one idem.Do per Do call, with its outcome.
	byOutcome := map[string]int{}
	for _, s := range tm.spans.Ended() {
		if s.Name() != "idem.Do" || s.InstrumentationScope().Name != idemotel.ScopeName {
			t.Errorf("span %q from %q", s.Name(), s.InstrumentationScope().Name)
			continue
		}
		for _, a := range s.Attributes() {
			if a.Key == idemotel.AttrOutcome {
				byOutcome[a.Value.AsString()]++
			}
			if a.Key == idemotel.AttrScope || a.Key == idemotel.AttrKey {
				t.Errorf("span records %s without WithKeys", a.Key)
			}
		}
		if name := spanOutcome(s); name == "error" && s.Status().Code.String() != "Error" {
			t.Errorf("failed Do's span status %v", s.Status())
		}
		if spanOutcome(s) == "won" && hasEvent(s, "idem.retry") {
			byOutcome["won-after-retry"]++
		}
	}
	want := map[string]int{"won": 6, "replay": 2, "mismatch": 1, "in-flight": 1, "error": 1, "won-after-retry": 1}
	for k, v := range want {
		if byOutcome[k] != v {
			t.Errorf("idem.Do spans with outcome %s: %d, want %d (all: %v)", k, byOutcome[k], v, byOutcome)
		}
	}
}

func spanOutcome(s sdktrace.ReadOnlySpan) string {
	for _, a := range s.Attributes() {
		if a.Key == idemotel.AttrOutcome {
			return a.Value.AsString()
		}
	}
	return ""
}

func hasEvent(s sdktrace.ReadOnlySpan, name string) bool {
	for _, e := range s.Events() {
		if e.Name == name {
			return true
		}
	}
	return false
}

// TestMiddlewareSpans: the HTTP span carries the outcome of the Do inside
// it and the status, and is the Do span's parent.
func TestMiddlewareSpans(t *testing.T) {
	tm := newTelemetry(t)
	store, _ := openStore(t, idem.Config{Observer: tm.obs})
	mw, err := idemhttp.New(store, idemhttp.Config{Principal: func(*http.Request) string { return "tenant-1" }, Unrouted: true})
	if err != nil {
		t.Fatal(err)
	}
	h := tm.obs.Middleware(mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
		w.Write([]byte("made"))
	})))
	send := func(key, body string) int {
		req := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader(body))
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code
	}
	for _, s := range []struct {
		key, body string
		status    int
	}{{"a", "1", 201}, {"a", "1", 201}, {"a", "2", 422}, {"", "1", 400}} {
		if got := send(s.key, s.body); got != s.status {
			t.Fatalf("POST key %q body %q: %d, want %d", s.key, s.body, got, s.status)
		}
	}
	var http, do []sdktrace.ReadOnlySpan
	for _, s := range tm.spans.Ended() {
		switch s.Name() {
		case "idem.http":
			http = append(http, s)
		case "idem.Do":
			do = append(do, s)
		}
	}
	if len(http) != 4 || len(do) != 3 {
		t.Fatalf("%d idem.http and %d idem.Do spans, want 4 and 3", len(http), len(do))
	}
	for i, want := range []struct {
		outcome string
		status  int64
	}{{"won", 201}, {"replay", 201}, {"mismatch", 422}, {"none", 400}} {
		var status int64
		for _, a := range http[i].Attributes() {
			if a.Key == "http.response.status_code" {
				status = a.Value.AsInt64()
			}
		}
		if got := spanOutcome(http[i]); got != want.outcome || status != want.status {
			t.Errorf("idem.http span %d: outcome %q status %d, want %q %d", i+1, got, status, want.outcome, want.status)
		}
	}
	for i, s := range do {
		if s.Parent().SpanID() != http[i].SpanContext().SpanID() {
			t.Errorf("idem.Do span %d is not the child of its idem.http span", i+1)
		}
	}
}

// TestKeylessCounter: a keyless request let through in optional-key mode
// counts once in idem.keyless; a request with a key does not count.
func TestKeylessCounter(t *testing.T) {
	tm := newTelemetry(t)
	store, _ := openStore(t, idem.Config{Observer: tm.obs})
	mw, err := idemhttp.New(store, idemhttp.Config{Principal: func(*http.Request) string { return "tenant-1" }, KeyOptional: true, Unrouted: true})
	if err != nil {
		t.Fatal(err)
	}
	h := mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusCreated) }))
	for _, key := range []string{"", "k1"} {
		req := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader("x"))
		if key != "" {
			req.Header.Set(idemhttp.HeaderKey, key)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusCreated {
			t.Fatalf("key %q: %d %s", key, rec.Code, rec.Body)
		}
	}
	m := tm.metrics(t)
	if got := sum(t, m["idem.keyless"], idemotel.AttrTable.String(idem.DefaultTable)); got != 1 {
		t.Errorf("idem.keyless = %d, want 1", got)
	}
	if m["idem.keyless"].Unit != "{request}" {
		t.Errorf("idem.keyless unit %q, want {request}", m["idem.keyless"].Unit)
	}
}

// TestTakeoverCounter: an expired lease taken over counts once in
// idem.takeovers; a fresh lease does not count.
func TestTakeoverCounter(t *testing.T) {
	ctx := context.Background()
	tm := newTelemetry(t)
	now := time.Now()
	store, _ := openStore(t, idem.Config{Observer: tm.obs, Lease: time.Minute, Clock: func() time.Time { return now }})
	req := request("leased", "x")
	if l, err := store.Lease(ctx, req); err != nil || l.Outcome != idem.Won {
		t.Fatalf("first Lease: %v", err)
	}
	if m, ok := tm.metrics(t)["idem.takeovers"]; ok {
		t.Errorf("idem.takeovers after a fresh lease: %+v, want nothing recorded", m)
	}
	now = now.Add(2 * time.Minute) // the holder crashed: its lease ended
	l, err := store.Lease(ctx, req)
	if err != nil || l.Outcome != idem.Won || l.Token() != 2 {
		t.Fatalf("takeover: %+v, %v; want won with token 2", l, err)
	}
	m := tm.metrics(t)
	if got := sum(t, m["idem.takeovers"], idemotel.AttrTable.String(idem.DefaultTable)); got != 1 {
		t.Errorf("idem.takeovers = %d, want 1", got)
	}
	if m["idem.takeovers"].Unit != "{takeover}" {
		t.Errorf("idem.takeovers unit %q, want {takeover}", m["idem.takeovers"].Unit)
	}
	if got := sum(t, m["idem.takeovers"], idemotel.AttrReleased.Bool(false)); got != 1 {
		t.Errorf("idem.takeovers of a lapsed lease = %d, want 1 with idem.released false", got)
	}
	// The new holder fails and releases the lease: the next takeover is
	// counted as of a released lease.
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if l, err := store.Lease(ctx, req); err != nil || l.Outcome != idem.Won || !l.Resumed() {
		t.Fatalf("takeover of the released lease: %+v, %v", l, err)
	}
	if got := sum(t, tm.metrics(t)["idem.takeovers"], idemotel.AttrReleased.Bool(true)); got != 1 {
		t.Errorf("idem.takeovers of a released lease = %d, want 1 with idem.released true", got)
	}
	leased := []attribute.KeyValue{idemotel.AttrTable.String(idem.DefaultTable), idemotel.AttrOutcome.String("won"), idemotel.AttrReadFirst.Bool(false), idemotel.AttrLease.Bool(true)}
	if got := sum(t, m["idem.claims"], leased...); got != 2 {
		t.Errorf("idem.claims of lease mode, won = %d, want 2 (the fresh lease and the takeover)", got)
	}
}

// TestErrorTypes: error.type names the idem meaning an error from Do
// matches: a response too large to store is too_large (whichever limit
// refused it), a function that ended its transaction is tx_ended, and a
// finished transaction that is not Do's doing is no more than other.
func TestErrorTypes(t *testing.T) {
	ctx := context.Background()
	tm := newTelemetry(t)
	for _, err := range []error{
		fmt.Errorf("idem: response body of 9 bytes is over Config.MaxBody (8): %w", idem.ErrTooLarge),
		dialect.Classified(dialect.ErrTooLarge, errors.New("max_allowed_packet")),
		&idem.TxEndedError{Scope: "s", Key: "k", Err: dialect.Classified(dialect.ErrTxDone, sql.ErrTxDone)},
		dialect.Classified(dialect.ErrTxDone, sql.ErrTxDone),
	} {
		_, done := tm.obs.StartDo(ctx, request("k", "x"))
		done(idem.Result{}, err)
	}
	m := tm.metrics(t)
	for typ, want := range map[string]uint64{"too_large": 2, "tx_ended": 1, "other": 1} {
		if n, _ := histogram[float64](t, m["idem.do.duration"], attribute.String("error.type", typ)); n != want {
			t.Errorf("idem.do.duration{error.type=%s}: %d, want %d", typ, n, want)
		}
	}
}

// TestRecoveryMetrics: RunRecovery's outcomes count in idem.recoveries by
// outcome, a resumed lease's run lands in idem.recovery.duration, and each
// round in idem.recovery.round.duration; the lease taken over is spanned.
func TestRecoveryMetrics(t *testing.T) {
	tm := newTelemetry(t)
	now := time.Now()
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	store, _ := openStore(t, idem.Config{Observer: tm.obs, Lease: time.Minute, Clock: clock})
	known, unknown := request("known", "x"), request("unknown", "x")
	known.Scope = idem.Scope("tenant-1", "pay")
	unknown.Scope = idem.Scope("tenant-1", "refund")
	for _, req := range []idem.Request{known, unknown} {
		if l, err := store.Lease(t.Context(), req); err != nil || l.Outcome != idem.Won {
			t.Fatalf("Lease %q: %+v, %v", req.Key, l, err)
		}
	}
	mu.Lock()
	now = now.Add(2 * time.Minute) // both holders are gone
	mu.Unlock()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var inner trace.SpanContext
	err := idem.RunRecovery(ctx, store, idem.Recovery[*sql.Tx]{
		Jitter: -1,
		Operations: map[string]idem.LeaseFunc[*sql.Tx]{"pay": func(ctx context.Context, _ *idem.Lease[*sql.Tx]) (idem.Response, error) {
			inner = trace.SpanContextFromContext(ctx)
			return idem.Response{Status: 201}, nil
		}},
		Report: func(idem.RecoveryRound) { cancel() },
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("RunRecovery: %v", err)
	}
	m := tm.metrics(t)
	table := idemotel.AttrTable.String(idem.DefaultTable)
	for outcome, want := range map[string]int64{"completed": 1, "unknown-scope": 1, "failed": 0, "taken": 0} {
		if got := sum(t, m["idem.recoveries"], table, idemotel.AttrRecovery.String(outcome)); got != want {
			t.Errorf("idem.recoveries{%s} = %d, want %d", outcome, got, want)
		}
	}
	if m["idem.recoveries"].Unit != "{lease}" {
		t.Errorf("idem.recoveries unit %q", m["idem.recoveries"].Unit)
	}
	if n, _ := histogram[float64](t, m["idem.recovery.duration"], table, idemotel.AttrRecovery.String("completed")); n != 1 {
		t.Errorf("idem.recovery.duration count %d, want 1 (the lease taken over; not the unknown one)", n)
	}
	if n, _ := histogram[float64](t, m["idem.recovery.round.duration"], table); n != 1 {
		t.Errorf("idem.recovery.round.duration count %d, want 1", n)
	}
	// One span, around the lease taken over, with the resumed function's
	// work under it; none for the unknown scope.
	var spans []sdktrace.ReadOnlySpan
	for _, s := range tm.spans.Ended() {
		if s.Name() == "idem.recovery" {
			spans = append(spans, s)
		}
	}
	if len(spans) != 1 {
		t.Fatalf("%d idem.recovery spans, want 1", len(spans))
	}
	if !has(attribute.NewSet(spans[0].Attributes()...), []attribute.KeyValue{idemotel.AttrRecovery.String("completed")}) {
		t.Errorf("idem.recovery span attributes %v, want idem.recovery=completed", spans[0].Attributes())
	}
	if !inner.IsValid() || inner.TraceID() != spans[0].SpanContext().TraceID() {
		t.Errorf("the resumed function's context is not under the idem.recovery span")
	}
}
