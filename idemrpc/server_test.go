package idemrpc_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemrpc"
	"github.com/idemkit/idem/idemtest"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

const method = "/orders.v1.Orders/Create"

// fixture is a core Server on a fresh SQLite store, and a handler that
// counts its runs and answers with their number.
type fixture struct {
	store *idem.Store[*sql.Tx]
	srv   *idemrpc.Server[*sql.Tx]
	runs  atomic.Int64
}

func newFixture(t *testing.T, storeCfg idem.Config, cfg idemrpc.Config) *fixture {
	t.Helper()
	f := &fixture{store: idemtest.NewSQLite(t, storeCfg).Store}
	cfg.Logger = quiet
	srv, err := idemrpc.NewServer(f.store, cfg)
	if err != nil {
		t.Fatal(err)
	}
	f.srv = srv
	return f
}

// call is a call by acme with the key values and a request fingerprinted
// from req.
func call(req string, keys ...string) idemrpc.Call {
	return idemrpc.Call{
		Method:      method,
		Keys:        keys,
		Principal:   "acme",
		Scope:       `"acme" rpc:"` + method + `"`,
		Fingerprint: func() (idem.Fingerprint, error) { return idem.Fingerprint{byte(len(req)), req[0]}, nil },
	}
}

// answer is a run function that answers "run N"; with fail it returns
// fail(N) instead.
func (f *fixture) answer(fail func(n int64) error) idem.Func[*sql.Tx] {
	return func(ctx context.Context, _ *sql.Tx) (idem.Response, error) {
		n := f.runs.Add(1)
		if _, ok := idemrpc.Tx[*sql.Tx](ctx); !ok {
			return idem.Response{}, errors.New("no transaction in the run's context")
		}
		if fail != nil {
			if err := fail(n); err != nil {
				return idem.Response{}, err
			}
		}
		return idem.Response{Status: idem.NoStatus, Body: fmt.Appendf(nil, "run %d", n)}, nil
	}
}

func (f *fixture) records(t *testing.T) int64 {
	t.Helper()
	c, err := f.store.Counts(t.Context(), "")
	if err != nil {
		t.Fatal(err)
	}
	return c.Total()
}

// refusal checks that err is idem's answer with the code and reason.
func refusal(t *testing.T, err error, code idemrpc.Code, reason string) *idemrpc.Error {
	t.Helper()
	var e *idemrpc.Error
	if !errors.As(err, &e) || e.Code != code || e.Reason != reason {
		t.Fatalf("%v, want %v with reason %q", err, code, reason)
	}
	return e
}

// TestServeRefuses: a missing or bad key, a missing principal and a
// fingerprint that fails are refused before anything runs.
func TestServeRefuses(t *testing.T) {
	badFingerprint := call("a", "k1")
	badFingerprint.Fingerprint = func() (idem.Fingerprint, error) { return idem.Fingerprint{}, errors.New("not a message") }
	anonymous := call("a", "k1")
	anonymous.Principal = ""
	for _, tc := range []struct {
		name   string
		call   idemrpc.Call
		code   idemrpc.Code
		reason string
	}{
		{"no key", call("a"), idemrpc.InvalidArgument, idemrpc.ReasonKeyMissing},
		{"two keys", call("a", "k1", "k2"), idemrpc.InvalidArgument, idemrpc.ReasonKeyInvalid},
		{"empty key", call("a", ""), idemrpc.InvalidArgument, idemrpc.ReasonKeyInvalid},
		{"key not ASCII", call("a", "clé"), idemrpc.InvalidArgument, idemrpc.ReasonKeyInvalid},
		{"no principal", anonymous, idemrpc.PermissionDenied, idemrpc.ReasonPrincipalMissing},
		{"fingerprint fails", badFingerprint, idemrpc.Internal, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, idem.Config{}, idemrpc.Config{KeyField: "Idempotency-Key header", Subject: "procedure"})
			_, err := f.srv.Serve(t.Context(), tc.call, f.answer(nil))
			e := refusal(t, err, tc.code, tc.reason)
			if tc.reason == idemrpc.ReasonKeyMissing && !strings.Contains(e.Message, "procedure requires an Idempotency-Key header") {
				t.Errorf("message %q does not speak the adapter's words", e.Message)
			}
			if f.runs.Load() != 0 || f.records(t) != 0 {
				t.Errorf("%d runs, %d records after a refusal", f.runs.Load(), f.records(t))
			}
		})
	}
	t.Run("AllowAnonymous", func(t *testing.T) {
		f := newFixture(t, idem.Config{}, idemrpc.Config{AllowAnonymous: true})
		if served, err := f.srv.Serve(t.Context(), anonymous, f.answer(nil)); err != nil || served.Verdict != idemrpc.Ran {
			t.Errorf("%+v, %v; want Ran", served, err)
		}
	})
}

// TestServeRunsThenReplays: the first call runs (Ran, committed), a retry
// gets the stored answer without running (Replayed), another request with
// the key is a mismatch.
func TestServeRunsThenReplays(t *testing.T) {
	f := newFixture(t, idem.Config{}, idemrpc.Config{})
	served, err := f.srv.Serve(t.Context(), call("a", "k1"), f.answer(nil))
	if err != nil || served.Verdict != idemrpc.Ran || !served.Committed {
		t.Fatalf("first call: %+v, %v; want Ran and committed", served, err)
	}
	served, err = f.srv.Serve(t.Context(), call("a", "k1"), f.answer(nil))
	if err != nil || served.Verdict != idemrpc.Replayed || string(served.Stored.Body) != "run 1" || served.Request.Key != "k1" {
		t.Fatalf("retry: %+v, %v; want Replayed with run 1's answer", served, err)
	}
	_, err = f.srv.Serve(t.Context(), call("b", "k1"), f.answer(nil))
	refusal(t, err, idemrpc.FailedPrecondition, idemrpc.ReasonMismatch)
	if runs := f.runs.Load(); runs != 1 {
		t.Errorf("%d runs, want 1", runs)
	}
}

// TestServeNotStored: an answer that is not stored (the run returns
// Unstored, or the store's StoreStatus refuses it: Do's Won with Committed
// false) is served as the last run gave it, and nothing is stored: a retry
// runs again.
func TestServeNotStored(t *testing.T) {
	for _, tc := range []struct {
		name     string
		storeCfg idem.Config
		fail     func(int64) error
	}{
		{"Unstored", idem.Config{}, func(int64) error { return idemrpc.Unstored(errors.New("provider down")) }},
		{"StoreStatus refuses", idem.Config{StoreStatus: func(int) bool { return false }}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, tc.storeCfg, idemrpc.Config{})
			for i := range 2 {
				served, err := f.srv.Serve(t.Context(), call("a", "k1"), f.answer(tc.fail))
				if err != nil || served.Verdict != idemrpc.Ran || served.Committed {
					t.Fatalf("call %d: %+v, %v; want Ran, not committed", i, served, err)
				}
			}
			if runs, n := f.runs.Load(), f.records(t); runs != 2 || n != 0 {
				t.Errorf("%d runs, %d records; want 2 and none", runs, n)
			}
		})
	}
}

// TestServeRerun: a retryable database error in a run (an Unstored one
// too) runs the handler again in a fresh transaction; the last run
// answers. When the retries run out, no run answers: Aborted.
func TestServeRerun(t *testing.T) {
	f := newFixture(t, idem.Config{}, idemrpc.Config{})
	served, err := f.srv.Serve(t.Context(), call("a", "k1"), f.answer(func(n int64) error {
		if n == 1 {
			return idemrpc.Unstored(fmt.Errorf("insert: %w", idem.ErrSerialization))
		}
		return nil
	}))
	if err != nil || served.Verdict != idemrpc.Ran || !served.Committed || f.runs.Load() != 2 {
		t.Fatalf("%+v, %v after %d runs; want Ran after 2", served, err, f.runs.Load())
	}

	f = newFixture(t, idem.Config{MaxAttempts: 2}, idemrpc.Config{RetryAfter: 3 * time.Second})
	_, err = f.srv.Serve(t.Context(), call("a", "k1"), f.answer(func(int64) error {
		return fmt.Errorf("insert: %w", idem.ErrSerialization)
	}))
	if e := refusal(t, err, idemrpc.Aborted, idemrpc.ReasonStoreUnavailable); e.RetryAfter != 3*time.Second {
		t.Errorf("RetryAfter %v, want 3s", e.RetryAfter)
	}
	if f.records(t) != 0 {
		t.Error("a record after the retries ran out")
	}
}

// TestServeUnstorable: an answer that cannot be stored rolls back and is
// Internal.
func TestServeUnstorable(t *testing.T) {
	f := newFixture(t, idem.Config{}, idemrpc.Config{})
	_, err := f.srv.Serve(t.Context(), call("a", "k1"), f.answer(func(int64) error {
		return idemrpc.Unstorable(errors.New("not a proto.Message"))
	}))
	refusal(t, err, idemrpc.Internal, "")
	if f.records(t) != 0 {
		t.Error("an unstorable answer was stored")
	}
}

// keyless counts EventKeyless.
type keyless struct{ n atomic.Int64 }

func (k *keyless) Observe(_ context.Context, e idem.Event) {
	if e.Kind == idem.EventKeyless {
		k.n.Add(1)
	}
}

// TestServePass: a keyless call under KeyOptional, and a call inside a
// run of the same store with its key or none, are let through without a
// run of their own.
func TestServePass(t *testing.T) {
	events := &keyless{}
	f := newFixture(t, idem.Config{Observer: events}, idemrpc.Config{KeyOptional: true})
	served, err := f.srv.Serve(t.Context(), call("a"), f.answer(nil))
	if err != nil || served.Verdict != idemrpc.Pass || events.n.Load() != 1 || f.runs.Load() != 0 {
		t.Errorf("keyless: %+v, %v, %d events, %d runs; want Pass, one event, no run", served, err, events.n.Load(), f.runs.Load())
	}

	other := newFixture(t, idem.Config{}, idemrpc.Config{})
	var inner, innerOther idemrpc.Served
	served, err = f.srv.Serve(t.Context(), call("a", "k1"), func(ctx context.Context, tx *sql.Tx) (idem.Response, error) {
		var err error
		// The same interceptor again, and another Server on the same
		// store: both let the call through.
		if inner, err = f.srv.Serve(ctx, call("a", "k1"), f.answer(nil)); err != nil {
			return idem.Response{}, err
		}
		second, err := idemrpc.NewServer(f.store, idemrpc.Config{})
		if err != nil {
			return idem.Response{}, err
		}
		if innerOther, err = second.Serve(ctx, call("a", "k1"), f.answer(nil)); err != nil {
			return idem.Response{}, err
		}
		if got, _ := idemrpc.Tx[*sql.Tx](ctx); got != tx {
			return idem.Response{}, errors.New("the run's context holds another transaction")
		}
		// A Server on another store is refused: its claim would commit
		// apart from this run's.
		if _, err := other.srv.Serve(ctx, call("a", "k1"), other.answer(nil)); !isNested(err) {
			return idem.Response{}, fmt.Errorf("another store's server inside: %v, want %s", err, idemrpc.ReasonNested)
		}
		// A call with another key (a handler calling another protected
		// handler in process) is refused: passed through, its key would
		// never be recorded. One without a key goes through.
		if _, err := f.srv.Serve(ctx, call("b", "k9"), f.answer(nil)); !isNested(err) {
			return idem.Response{}, fmt.Errorf("a call with another key inside: %v, want %s", err, idemrpc.ReasonNested)
		}
		if keyless, err := f.srv.Serve(ctx, call("b"), f.answer(nil)); err != nil || keyless.Verdict != idemrpc.Pass {
			return idem.Response{}, fmt.Errorf("a call without a key inside: %+v, %v, want Pass", keyless, err)
		}
		return idem.Response{Status: idem.NoStatus, Body: []byte("outer")}, nil
	})
	if err != nil || served.Verdict != idemrpc.Ran || inner.Verdict != idemrpc.Pass || innerOther.Verdict != idemrpc.Pass {
		t.Errorf("outer %+v, %v; inner %+v and %+v; want Ran outside, Pass inside", served, err, inner, innerOther)
	}
	if f.runs.Load() != 0 || other.runs.Load() != 0 || f.records(t) != 1 || other.records(t) != 0 {
		t.Errorf("%d inner runs, %d on the other store, %d and %d records; want 0, 0, 1 and 0", f.runs.Load(), other.runs.Load(), f.records(t), other.records(t))
	}
	// Inside a run of the store that is no server's (a bare Do, an HTTP
	// middleware's run), the handler would find no transaction: refused.
	_, err = f.store.Do(t.Context(), idem.Request{Scope: "s", Key: "bare", Fingerprint: idem.Fingerprint{1}}, func(ctx context.Context, _ *sql.Tx) (idem.Response, error) {
		if _, err := f.srv.Serve(ctx, call("a", "k2"), f.answer(nil)); !isNested(err) {
			return idem.Response{}, fmt.Errorf("a server inside a bare Do: %v, want %s", err, idemrpc.ReasonNested)
		}
		return idem.Response{Status: 200}, nil
	})
	if err != nil || f.runs.Load() != 0 {
		t.Errorf("%v, %d runs", err, f.runs.Load())
	}
	if _, ok := idemrpc.Tx[*sql.Tx](t.Context()); ok {
		t.Error("Tx outside a run reported true")
	}
}

func isNested(err error) bool {
	var e *idemrpc.Error
	return errors.As(err, &e) && e.Reason == idemrpc.ReasonNested && e.Code == idemrpc.Internal
}

// TestServeFormerScope: a record under the former scope answers without a
// run.
func TestServeFormerScope(t *testing.T) {
	f := newFixture(t, idem.Config{}, idemrpc.Config{})
	old := call("a", "k1")
	old.Scope = "grpc old form"
	if _, err := f.srv.Serve(t.Context(), old, f.answer(nil)); err != nil {
		t.Fatal(err)
	}
	now := call("a", "k1")
	now.FormerScope = old.Scope
	served, err := f.srv.Serve(t.Context(), now, f.answer(nil))
	if err != nil || served.Verdict != idemrpc.Replayed || string(served.Stored.Body) != "run 1" || f.runs.Load() != 1 {
		t.Errorf("%+v, %v after %d runs; want the former record replayed", served, err, f.runs.Load())
	}
}

// TestServeInFlight: while a call holds the key, another with it is
// Aborted with RetryInfo; on SQLite the wait was for the database.
func TestServeInFlight(t *testing.T) {
	f := newFixture(t, idem.Config{WaitBound: 50 * time.Millisecond}, idemrpc.Config{})
	entered, release := make(chan struct{}), make(chan struct{})
	first := make(chan error, 1)
	go func() {
		_, err := f.srv.Serve(context.Background(), call("a", "k1"), f.answer(func(int64) error {
			close(entered)
			<-release
			return nil
		}))
		first <- err
	}()
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the first call never ran")
	}
	_, err := f.srv.Serve(t.Context(), call("a", "k1"), f.answer(nil))
	close(release)
	if e := refusal(t, err, idemrpc.Aborted, idemrpc.ReasonDatabaseBusy); e.RetryAfter != idemrpc.DefaultRetryAfter {
		t.Errorf("RetryAfter %v, want the default", e.RetryAfter)
	}
	if err := <-first; err != nil {
		t.Fatal(err)
	}
}

// TestServeContextEnded: a call whose context ended is answered with the
// context's code.
func TestServeContextEnded(t *testing.T) {
	f := newFixture(t, idem.Config{}, idemrpc.Config{})
	canceled, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := f.srv.Serve(canceled, call("a", "k1"), f.answer(nil))
	refusal(t, err, idemrpc.Canceled, "")
	expired, cancel := context.WithDeadline(t.Context(), time.Now().Add(-time.Second))
	defer cancel()
	_, err = f.srv.Serve(expired, call("a", "k2"), f.answer(nil))
	refusal(t, err, idemrpc.DeadlineExceeded, "")
}

// TestStream: a stream the adapter's Protect selects is refused, unless
// KeyOptional lets a keyless one through.
func TestStream(t *testing.T) {
	events := &keyless{}
	f := newFixture(t, idem.Config{Observer: events}, idemrpc.Config{Subject: "procedure"})
	e := refusal(t, f.srv.Stream(t.Context(), method, []string{"k1"}, nil), idemrpc.Unimplemented, idemrpc.ReasonStreamUnsupported)
	if !strings.Contains(e.Message, "procedure is a stream") {
		t.Errorf("message %q", e.Message)
	}
	refusal(t, f.srv.Stream(t.Context(), method, nil, nil), idemrpc.Unimplemented, idemrpc.ReasonStreamUnsupported)

	optional := newFixture(t, idem.Config{Observer: events}, idemrpc.Config{KeyOptional: true})
	refusal(t, optional.srv.Stream(t.Context(), method, []string{"k1"}, nil), idemrpc.Unimplemented, idemrpc.ReasonStreamUnsupported)
	if err := optional.srv.Stream(t.Context(), method, nil, func() string { return "s" }); err != nil || events.n.Load() != 1 {
		t.Errorf("keyless stream under KeyOptional: %v, %d events; want it through, one event", err, events.n.Load())
	}
}

// TestUnreadable: a stored answer the adapter cannot decode is Internal.
func TestUnreadable(t *testing.T) {
	f := newFixture(t, idem.Config{}, idemrpc.Config{})
	refusal(t, f.srv.Unreadable(t.Context(), method, idemrpc.Served{}, errors.New("bad bytes")), idemrpc.Internal, "")
}

// TestNewServer: a nil store and a negative RetryAfter are refused.
func TestNewServer(t *testing.T) {
	store := idemtest.NewSQLite(t, idem.Config{}).Store
	for _, tc := range []struct {
		name  string
		store *idem.Store[*sql.Tx]
		cfg   idemrpc.Config
	}{
		{"nil store", nil, idemrpc.Config{}},
		{"negative RetryAfter", store, idemrpc.Config{RetryAfter: -time.Second}},
	} {
		if _, err := idemrpc.NewServer(tc.store, tc.cfg); !errors.Is(err, idem.ErrInvalidConfig) {
			t.Errorf("%s: %v, want an error matching idem.ErrInvalidConfig", tc.name, err)
		}
	}
	if _, err := idemrpc.NewServer[*sql.Tx](nil, idemrpc.Config{Transport: "idemx"}); err == nil || !strings.HasPrefix(err.Error(), "idemx: ") {
		t.Errorf("%v, want it to name the transport", err)
	}
}

// TestServeHandlersOwnError: a handler's own error that is not stored is
// its answer (Ran), whatever it wraps: one that wraps idem.ErrCommitUnknown
// or idem.ErrTooLarge (from a store of its own, say) is not taken for
// idem's.
func TestServeHandlersOwnError(t *testing.T) {
	for _, wrapped := range []error{idem.ErrCommitUnknown, idem.ErrTooLarge} {
		f := newFixture(t, idem.Config{}, idemrpc.Config{})
		served, err := f.srv.Serve(t.Context(), call("a", "k1"), f.answer(func(int64) error {
			return idemrpc.Unstored(fmt.Errorf("the ledger's own commit: %w", wrapped))
		}))
		if err != nil || served.Verdict != idemrpc.Ran || served.Committed || f.records(t) != 0 {
			t.Errorf("handler error wrapping %v: %+v, %v, %d records; want Ran, not stored", wrapped, served, err, f.records(t))
		}
	}
}
