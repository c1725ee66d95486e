package idem_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/dialect"
)

func fakeRequest(key string) idem.Request {
	return idem.Request{Scope: "tenant-1 POST /orders", Key: key, Fingerprint: idem.FingerprintRequest("POST", "/orders", []byte(key))}
}

// TestDoControlFlow drives Do against a scripted driver: which errors are
// retried, what is returned unchanged, when the transaction commits, and that
// every transaction begun is ended.
func TestDoControlFlow(t *testing.T) {
	boom := errors.New("payment provider said no")
	req := fakeRequest("k1")
	other := idem.FingerprintRequest("POST", "/orders", []byte("another body"))
	ok := idem.Response{Status: http.StatusCreated, Body: []byte("created")}

	type want struct {
		outcome   idem.Outcome
		committed bool
		err       []error // each must match errors.Is; nil: no error
		same      error   // when set, the error must be exactly this value
		calls     int     // runs of fn
		begins    int
		completes int
		commits   int
		lookups   int
		busy      bool  // Result.Busy
		token     int64 // Result.Record.Token
	}
	readFirst := idem.Config{ReadFirst: idem.ReadFirstAlways}
	lookupFinds := func(rec dialect.Record) func(f *fakeDriver, _ context.CancelFunc) {
		return func(f *fakeDriver, _ context.CancelFunc) {
			f.lookup = func(a dialect.LookupArgs) (dialect.Record, bool, error) {
				if a.Scope != req.Scope || a.Key != req.Key {
					t.Errorf("lookup of %q/%q, want %q/%q", a.Scope, a.Key, req.Scope, req.Key)
				}
				return rec, true, nil
			}
		}
	}
	for _, tc := range []struct {
		name string
		cfg  idem.Config
		// script sets up the driver; cancel cancels the context Do runs in.
		script func(f *fakeDriver, cancel context.CancelFunc)
		// fn answers call n (from 1).
		fn   func(n int) (idem.Response, error)
		nilF bool
		req  *idem.Request
		want want
	}{
		{
			name: "won and committed",
			fn:   func(int) (idem.Response, error) { return ok, nil },
			want: want{outcome: idem.Won, committed: true, calls: 1, begins: 1, completes: 1, commits: 1},
		},
		{
			name: "function error is returned unchanged, rolled back, not retried",
			fn:   func(int) (idem.Response, error) { return idem.Response{}, boom },
			want: want{same: boom, calls: 1, begins: 1},
		},
		{
			name: "wrapped function error is returned unchanged",
			fn: func(int) (idem.Response, error) {
				return idem.Response{}, fmt.Errorf("charge: %w", boom)
			},
			want: want{err: []error{boom}, calls: 1, begins: 1},
		},
		{
			name: "raw driver error from the function is classified and retried",
			cfg:  idem.Config{MaxAttempts: 3},
			fn: func(n int) (idem.Response, error) {
				if n < 3 {
					return idem.Response{}, errRawSerialization
				}
				return ok, nil
			},
			want: want{outcome: idem.Won, committed: true, calls: 3, begins: 3, completes: 1, commits: 1},
		},
		{
			name: "raw deadlock from the function is retried until attempts run out",
			cfg:  idem.Config{MaxAttempts: 2},
			fn:   func(int) (idem.Response, error) { return idem.Response{}, errRawDeadlock },
			// The function's error is kept as the cause, with its
			// classification, like errors from idem's own statements.
			want: want{err: []error{idem.ErrRetriesExhausted, errRawDeadlock, idem.ErrDeadlock}, calls: 2, begins: 2},
		},
		{
			name: "retryable claim error retries the transaction",
			cfg:  idem.Config{MaxAttempts: 3},
			script: func(f *fakeDriver, _ context.CancelFunc) {
				f.claim = func(_ context.Context, n int, _ dialect.ClaimArgs) (dialect.ClaimResult, error) {
					if n == 1 {
						return dialect.ClaimResult{}, errRawSerialization
					}
					return dialect.ClaimResult{Won: true}, nil
				}
			},
			fn:   func(int) (idem.Response, error) { return ok, nil },
			want: want{outcome: idem.Won, committed: true, calls: 1, begins: 2, completes: 1, commits: 1},
		},
		{
			name: "a lost connection before COMMIT retries the transaction",
			cfg:  idem.Config{MaxAttempts: 3},
			script: func(f *fakeDriver, _ context.CancelFunc) {
				f.beginErr = func(n int) error {
					if n == 1 {
						return errRawConnLost
					}
					return nil
				}
			},
			fn:   func(int) (idem.Response, error) { return ok, nil },
			want: want{outcome: idem.Won, committed: true, calls: 1, begins: 2, completes: 1, commits: 1},
		},
		{
			name: "non-retryable claim error is not retried",
			cfg:  idem.Config{MaxAttempts: 5},
			script: func(f *fakeDriver, _ context.CancelFunc) {
				f.claim = func(context.Context, int, dialect.ClaimArgs) (dialect.ClaimResult, error) {
					return dialect.ClaimResult{}, errors.New("fake: relation does not exist")
				}
			},
			fn:   func(int) (idem.Response, error) { return ok, nil },
			want: want{err: []error{}, begins: 1},
		},
		{
			name: "non-retryable complete error is not retried",
			cfg:  idem.Config{MaxAttempts: 5},
			script: func(f *fakeDriver, _ context.CancelFunc) {
				f.complete = func(dialect.CompleteArgs) error {
					return dialect.Classified(dialect.ErrTooLarge, errors.New("fake: value too long"))
				}
			},
			fn:   func(int) (idem.Response, error) { return ok, nil },
			want: want{err: []error{idem.ErrTooLarge}, calls: 1, begins: 1},
		},
		{
			name: "invalid response is not retried and stores nothing",
			cfg:  idem.Config{MaxAttempts: 5},
			fn:   func(int) (idem.Response, error) { return idem.Response{Status: 600}, nil },
			want: want{err: []error{idem.ErrInvalidResponse}, calls: 1, begins: 1},
		},
		{
			name: "response too large is not retried",
			cfg:  idem.Config{MaxAttempts: 5, MaxBody: 4},
			fn:   func(int) (idem.Response, error) { return idem.Response{Status: 200, Body: []byte("12345")}, nil },
			want: want{err: []error{idem.ErrTooLarge}, calls: 1, begins: 1},
		},
		{
			name: "commit with unknown outcome is reported, not retried",
			cfg:  idem.Config{MaxAttempts: 5},
			script: func(f *fakeDriver, _ context.CancelFunc) {
				f.commitErr = errRawCommitLost
			},
			fn:   func(int) (idem.Response, error) { return ok, nil },
			want: want{err: []error{idem.ErrCommitUnknown, errRawCommitLost}, calls: 1, begins: 1, completes: 1, commits: 1},
		},
		{
			name: "lock timeout during the claim is in flight",
			script: func(f *fakeDriver, _ context.CancelFunc) {
				f.claim = func(context.Context, int, dialect.ClaimArgs) (dialect.ClaimResult, error) {
					return dialect.ClaimResult{}, errRawLockTimeout
				}
			},
			fn:   func(int) (idem.Response, error) { return ok, nil },
			want: want{outcome: idem.InFlight, begins: 1, lookups: 1},
		},
		{
			name: "lock timeout during the claim on a committed pending record is in flight with the record",
			script: func(f *fakeDriver, cancel context.CancelFunc) {
				f.claim = func(context.Context, int, dialect.ClaimArgs) (dialect.ClaimResult, error) {
					return dialect.ClaimResult{}, errRawLockTimeout
				}
				lookupFinds(dialect.Record{Key: "k1", Fingerprint: req.Fingerprint[:], State: dialect.Pending, Token: 3})(f, cancel)
			},
			fn:   func(int) (idem.Response, error) { return ok, nil },
			want: want{outcome: idem.InFlight, token: 3, begins: 1, lookups: 1},
		},
		{
			name: "lock timeout at begin is in flight",
			script: func(f *fakeDriver, _ context.CancelFunc) {
				f.beginErr = func(int) error { return errRawLockTimeout }
			},
			fn:   func(int) (idem.Response, error) { return ok, nil },
			want: want{outcome: idem.InFlight, begins: 1, lookups: 1},
		},
		{
			name: "lock timeout at begin on a database-wide write lock, no record: busy",
			script: func(f *fakeDriver, _ context.CancelFunc) {
				f.caps.DatabaseWriteLock = true
				f.beginErr = func(int) error { return errRawLockTimeout }
			},
			fn:   func(int) (idem.Response, error) { return ok, nil },
			want: want{outcome: idem.InFlight, busy: true, begins: 1, lookups: 1},
		},
		{
			name: "lock timeout at begin, the key's work already stored: replay",
			script: func(f *fakeDriver, cancel context.CancelFunc) {
				f.caps.DatabaseWriteLock = true
				f.beginErr = func(int) error { return errRawLockTimeout }
				lookupFinds(dialect.Record{Key: "k1", Fingerprint: req.Fingerprint[:], State: dialect.Completed, Status: 201, Body: []byte("stored")})(f, cancel)
			},
			fn:   func(int) (idem.Response, error) { return ok, nil },
			want: want{outcome: idem.Replay, begins: 1, lookups: 1},
		},
		{
			name: "cancelled context while waiting is an error, not in flight",
			script: func(f *fakeDriver, cancel context.CancelFunc) {
				f.claim = func(ctx context.Context, _ int, _ dialect.ClaimArgs) (dialect.ClaimResult, error) {
					cancel() // the caller gave up while the claim waited
					return dialect.ClaimResult{}, errRawLockTimeout
				}
			},
			fn:   func(int) (idem.Response, error) { return ok, nil },
			want: want{err: []error{context.Canceled}, begins: 1},
		},
		{
			name: "cancelled context at begin is an error, not in flight",
			script: func(f *fakeDriver, cancel context.CancelFunc) {
				f.beginErr = func(int) error { cancel(); return errRawLockTimeout }
			},
			fn:   func(int) (idem.Response, error) { return ok, nil },
			want: want{err: []error{context.Canceled}, begins: 1},
		},
		{
			name: "completed record with the same fingerprint replays",
			script: func(f *fakeDriver, _ context.CancelFunc) {
				f.claim = func(context.Context, int, dialect.ClaimArgs) (dialect.ClaimResult, error) {
					return dialect.ClaimResult{Record: dialect.Record{Key: "k1", Fingerprint: req.Fingerprint[:], State: dialect.Completed, Status: 201, Body: []byte("stored")}}, nil
				}
			},
			fn:   func(int) (idem.Response, error) { return ok, nil },
			want: want{outcome: idem.Replay, begins: 1},
		},
		{
			name: "completed record with another fingerprint is a mismatch",
			script: func(f *fakeDriver, _ context.CancelFunc) {
				f.claim = func(context.Context, int, dialect.ClaimArgs) (dialect.ClaimResult, error) {
					return dialect.ClaimResult{Record: dialect.Record{Key: "k1", Fingerprint: other[:], State: dialect.Completed, Status: 201}}, nil
				}
			},
			fn:   func(int) (idem.Response, error) { return ok, nil },
			want: want{outcome: idem.Mismatch, begins: 1},
		},
		{
			name: "in-flight record with another fingerprint is a mismatch",
			script: func(f *fakeDriver, _ context.CancelFunc) {
				f.claim = func(context.Context, int, dialect.ClaimArgs) (dialect.ClaimResult, error) {
					return dialect.ClaimResult{Record: dialect.Record{Key: "k1", Fingerprint: other[:], State: dialect.Pending}}, nil
				}
			},
			fn:   func(int) (idem.Response, error) { return ok, nil },
			want: want{outcome: idem.Mismatch, begins: 1},
		},
		{
			name: "in-flight record with the same fingerprint is in flight",
			script: func(f *fakeDriver, _ context.CancelFunc) {
				f.claim = func(context.Context, int, dialect.ClaimArgs) (dialect.ClaimResult, error) {
					return dialect.ClaimResult{Record: dialect.Record{Key: "k1", Fingerprint: req.Fingerprint[:], State: dialect.Pending}}, nil
				}
			},
			fn:   func(int) (idem.Response, error) { return ok, nil },
			want: want{outcome: idem.InFlight, begins: 1},
		},
		{
			name: "stored fingerprint of the wrong size is an error",
			script: func(f *fakeDriver, _ context.CancelFunc) {
				f.claim = func(context.Context, int, dialect.ClaimArgs) (dialect.ClaimResult, error) {
					return dialect.ClaimResult{Record: dialect.Record{Key: "k1", Fingerprint: req.Fingerprint[:31], State: dialect.Completed}}, nil
				}
			},
			fn:   func(int) (idem.Response, error) { return ok, nil },
			want: want{err: []error{}, begins: 1},
		},
		{
			name:   "read first: a completed record replays without a transaction",
			cfg:    readFirst,
			script: lookupFinds(dialect.Record{Key: "k1", Fingerprint: req.Fingerprint[:], State: dialect.Completed, Status: 201, Body: []byte("stored")}),
			fn:     func(int) (idem.Response, error) { return ok, nil },
			want:   want{outcome: idem.Replay, lookups: 1},
		},
		{
			name:   "read first: another fingerprint is a mismatch without a transaction",
			cfg:    readFirst,
			script: lookupFinds(dialect.Record{Key: "k1", Fingerprint: other[:], State: dialect.Pending}),
			fn:     func(int) (idem.Response, error) { return ok, nil },
			want:   want{outcome: idem.Mismatch, lookups: 1},
		},
		{
			name:   "read first: an in-flight record leaves the decision to the claim",
			cfg:    readFirst,
			script: lookupFinds(dialect.Record{Key: "k1", Fingerprint: req.Fingerprint[:], State: dialect.Pending}),
			fn:     func(int) (idem.Response, error) { return ok, nil },
			want:   want{outcome: idem.Won, committed: true, calls: 1, begins: 1, completes: 1, commits: 1, lookups: 1},
		},
		{
			name: "read first: no record, the claim wins",
			cfg:  readFirst,
			fn:   func(int) (idem.Response, error) { return ok, nil },
			want: want{outcome: idem.Won, committed: true, calls: 1, begins: 1, completes: 1, commits: 1, lookups: 1},
		},
		{
			name: "read first: a transient error on the read falls through to the claim",
			cfg:  readFirst,
			script: func(f *fakeDriver, _ context.CancelFunc) {
				f.lookup = func(dialect.LookupArgs) (dialect.Record, bool, error) { return dialect.Record{}, false, errRawConnLost }
			},
			fn:   func(int) (idem.Response, error) { return ok, nil },
			want: want{outcome: idem.Won, committed: true, calls: 1, begins: 1, completes: 1, commits: 1, lookups: 1},
		},
		{
			name: "read first: any other failed read falls through to the claim too",
			cfg:  readFirst,
			script: func(f *fakeDriver, _ context.CancelFunc) {
				f.lookup = func(dialect.LookupArgs) (dialect.Record, bool, error) { return dialect.Record{}, false, boom }
			},
			fn:   func(int) (idem.Response, error) { return ok, nil },
			want: want{outcome: idem.Won, committed: true, calls: 1, begins: 1, completes: 1, commits: 1, lookups: 1},
		},
		{
			name: "read first: a read cut short by the caller's context is returned, nothing begun",
			cfg:  readFirst,
			script: func(f *fakeDriver, cancel context.CancelFunc) {
				f.lookup = func(dialect.LookupArgs) (dialect.Record, bool, error) {
					cancel()
					return dialect.Record{}, false, context.Canceled
				}
			},
			fn:   func(int) (idem.Response, error) { return ok, nil },
			want: want{err: []error{context.Canceled}, lookups: 1},
		},
		{
			name:   "read first: a corrupt record is an error, not a replay",
			cfg:    readFirst,
			script: lookupFinds(dialect.Record{Key: "k1", Fingerprint: []byte{1, 2}, State: dialect.Completed, Status: 201}),
			fn:     func(int) (idem.Response, error) { return ok, nil },
			want:   want{err: []error{}, lookups: 1},
		},
		{
			name: "nil function is refused before anything begins",
			nilF: true,
			want: want{err: []error{idem.ErrInvalidConfig}},
		},
		{
			name: "invalid key is refused before anything begins",
			req:  &idem.Request{Scope: "s", Key: "bad\x7f"},
			fn:   func(int) (idem.Response, error) { return ok, nil },
			want: want{err: []error{idem.ErrInvalidKey}},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store, f, err := newFakeStore(tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if tc.script != nil {
				tc.script(f, cancel)
			}
			calls := 0
			var fn idem.Func[*fakeTx]
			if !tc.nilF {
				fn = func(ctx context.Context, tx *fakeTx) (idem.Response, error) {
					calls++
					if tx == nil || tx.committed || tx.rolledBack {
						t.Errorf("function got transaction %+v, want an open one", tx)
					}
					return tc.fn(calls)
				}
			}
			r := req
			if tc.req != nil {
				r = *tc.req
			}
			res, err := store.Do(ctx, r, fn)

			w := tc.want
			switch {
			case w.same != nil:
				if err != w.same {
					t.Errorf("Do error = %v (%T), want exactly %v", err, err, w.same)
				}
			case w.err == nil:
				if err != nil {
					t.Errorf("Do error = %v, want none", err)
				}
			default:
				if err == nil {
					t.Errorf("Do error = nil, want one matching %v", w.err)
				}
				for _, target := range w.err {
					if !errors.Is(err, target) {
						t.Errorf("Do error = %v, want errors.Is %v", err, target)
					}
				}
			}
			if err == nil {
				if res.Outcome != w.outcome || res.Committed != w.committed {
					t.Errorf("Do = %v committed %v, want %v committed %v", res.Outcome, res.Committed, w.outcome, w.committed)
				}
				if res.Busy != w.busy || res.Record.Token != w.token {
					t.Errorf("Do = busy %v record token %d, want busy %v token %d", res.Busy, res.Record.Token, w.busy, w.token)
				}
			} else if res.Outcome != 0 || res.Committed {
				t.Errorf("Do returned %+v with its error, want a zero Result", res)
			}
			if w.outcome == idem.Replay && (res.Response.Status != 201 || string(res.Response.Body) != "stored") {
				t.Errorf("replayed %d %q, want the stored 201 %q", res.Response.Status, res.Response.Body, "stored")
			}
			if calls != w.calls {
				t.Errorf("function ran %d times, want %d", calls, w.calls)
			}
			if got := f.begins(); got != w.begins {
				t.Errorf("%d transactions begun, want %d", got, w.begins)
			}
			if len(f.completes) != w.completes {
				t.Errorf("Complete ran %d times, want %d", len(f.completes), w.completes)
			}
			if f.commits != w.commits {
				t.Errorf("%d commits, want %d", f.commits, w.commits)
			}
			if f.lookups != w.lookups {
				t.Errorf("%d reads before claiming, want %d", f.lookups, w.lookups)
			}
			if n := f.openTxs(); n != 0 {
				t.Errorf("%d transactions left open", n)
			}
		})
	}
}

// TestDoStatusPolicy: by default responses below 500 are stored and
// committed, except 400, 408, 422, 425 and 429; the others are returned but rolled
// back. Config.StoreStatus replaces the rule.
func TestDoStatusPolicy(t *testing.T) {
	for _, tc := range []struct {
		status      int
		storeErrors bool
		stored      bool
	}{
		{idem.NoStatus, false, true},
		{100, false, true},
		{200, false, true},
		{204, false, true},
		{301, false, true},
		{400, false, false},
		{404, false, true},
		{409, false, true},
		{422, false, false},
		{400, true, true},
		{422, true, true},
		{499, false, true},
		{407, false, true},
		{408, false, false},
		{425, false, false},
		{429, false, false},
		{430, false, true},
		{500, false, false},
		{502, false, false},
		{503, false, false},
		{599, false, false},
		{500, true, true},
		{599, true, true},
		{429, true, true},
	} {
		t.Run(fmt.Sprintf("%d/store-everything=%v", tc.status, tc.storeErrors), func(t *testing.T) {
			cfg := idem.Config{}
			if tc.storeErrors {
				cfg.StoreStatus = func(int) bool { return true }
			}
			store, f, err := newFakeStore(cfg)
			if err != nil {
				t.Fatal(err)
			}
			resp := idem.Response{Status: tc.status, Body: []byte("b")}
			res, err := store.Do(context.Background(), fakeRequest("k"), func(context.Context, *fakeTx) (idem.Response, error) {
				return resp, nil
			})
			if err != nil {
				t.Fatalf("Do: %v", err)
			}
			if res.Outcome != idem.Won || res.Response.Status != tc.status {
				t.Errorf("Do = %v %d, want won %d", res.Outcome, res.Response.Status, tc.status)
			}
			if res.Committed != tc.stored || (len(f.completes) == 1) != tc.stored || (f.commits == 1) != tc.stored {
				t.Errorf("status %d: committed %v, %d completes, %d commits; want stored=%v",
					tc.status, res.Committed, len(f.completes), f.commits, tc.stored)
			}
			if n := f.openTxs(); n != 0 {
				t.Errorf("%d transactions left open", n)
			}
		})
	}
}

// TestDoNoStatus: work without an HTTP status stores Status 0 with its
// payload (the dialect is handed 0, not a made-up HTTP status), and a
// completed record with status 0 replays as 0 with its payload, through the
// claim and through ReadFirst.
func TestDoNoStatus(t *testing.T) {
	store, f, err := newFakeStore(idem.Config{})
	if err != nil {
		t.Fatal(err)
	}
	req := fakeRequest("msg-1")
	res, err := store.Do(context.Background(), req, func(context.Context, *fakeTx) (idem.Response, error) {
		return idem.Response{Status: idem.NoStatus, Body: []byte("order 7")}, nil
	})
	if err != nil || res.Outcome != idem.Won || !res.Committed || res.Response.Status != 0 {
		t.Fatalf("Do = %+v, %v; want won and committed with status 0", res, err)
	}
	if len(f.completes) != 1 || f.completes[0].Status != 0 || string(f.completes[0].Body) != "order 7" || len(f.completes[0].Header) != 0 {
		t.Fatalf("completes = %+v, want one with status 0, body %q and no header", f.completes, "order 7")
	}

	stored := dialect.Record{Scope: req.Scope, Key: req.Key, Fingerprint: req.Fingerprint[:], State: dialect.Completed,
		Status: 0, Header: []byte{}, Body: []byte("order 7")}
	for _, readFirst := range []idem.ReadFirstPolicy{idem.ReadFirstNever, idem.ReadFirstAlways} {
		t.Run("read-first="+readFirst.String(), func(t *testing.T) {
			store, f, err := newFakeStore(idem.Config{ReadFirst: readFirst})
			if err != nil {
				t.Fatal(err)
			}
			f.claim = func(context.Context, int, dialect.ClaimArgs) (dialect.ClaimResult, error) {
				return dialect.ClaimResult{Record: stored}, nil
			}
			f.lookup = func(dialect.LookupArgs) (dialect.Record, bool, error) { return stored, true, nil }
			res, err := store.Do(context.Background(), req, func(context.Context, *fakeTx) (idem.Response, error) {
				t.Error("the work ran again")
				return idem.Response{Status: 201}, nil
			})
			if err != nil || res.Outcome != idem.Replay || res.Response.Status != 0 || string(res.Response.Body) != "order 7" || res.Response.Header != nil {
				t.Fatalf("Do = %+v, %v; want a replay of status 0 with body %q", res, err, "order 7")
			}
		})
	}
}

// TestDoPanicRollsBack: a panicking function leaves no open transaction and
// the panic propagates.
func TestDoPanicRollsBack(t *testing.T) {
	store, f, err := newFakeStore(idem.Config{})
	if err != nil {
		t.Fatal(err)
	}
	func() {
		defer func() {
			if r := recover(); r != "handler bug" {
				t.Errorf("recovered %v, want the function's panic", r)
			}
		}()
		_, _ = store.Do(context.Background(), fakeRequest("k"), func(context.Context, *fakeTx) (idem.Response, error) {
			panic("handler bug")
		})
	}()
	if f.commits != 0 || f.openTxs() != 0 {
		t.Errorf("after panic: %d commits, %d open transactions; want 0 and 0", f.commits, f.openTxs())
	}
}

// TestDoRetryWaitObeysContext: a context that ends during the backoff
// between attempts stops Do with the context's error and the last cause.
func TestDoRetryWaitObeysContext(t *testing.T) {
	store, f, err := newFakeStore(idem.Config{MaxAttempts: 1000})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = store.Do(ctx, fakeRequest("k"), func(context.Context, *fakeTx) (idem.Response, error) {
		return idem.Response{}, errRawSerialization
	})
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, errRawSerialization) {
		t.Errorf("Do = %v, want context.DeadlineExceeded and the last attempt's error", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Do returned %v after its context ended", d)
	}
	if f.openTxs() != 0 {
		t.Errorf("%d transactions left open", f.openTxs())
	}
}

// TestPurgeBatches: Purge runs batches of Config.PurgeBatch until one comes
// back short, retries a batch on retryable errors, and begins each batch as
// a READ COMMITTED transaction of its own.
func TestPurgeBatches(t *testing.T) {
	for _, tc := range []struct {
		name        string
		batch       int
		steps       []purgeStep
		wantDeleted int64
		wantBatches int
		wantErr     error
	}{
		{"nothing to delete", 7, []purgeStep{{n: 0}}, 0, 1, nil},
		{"short first batch", 7, []purgeStep{{n: 6}}, 6, 1, nil},
		{"full batches then a short one", 7, []purgeStep{{n: 7}, {n: 7}, {n: 1}}, 15, 3, nil},
		{"full batches then an empty one", 7, []purgeStep{{n: 7}, {n: 7}, {n: 0}}, 14, 3, nil},
		{"retryable error retries the batch", 7, []purgeStep{{n: 7}, {err: errRawSerialization}, {n: 3}}, 10, 2, nil},
		{"other error stops", 7, []purgeStep{{n: 7}, {err: errors.New("fake: disk I/O error")}}, 7, 1, errors.New("")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store, f, err := newFakeStore(idem.Config{PurgeBatch: tc.batch})
			if err != nil {
				t.Fatal(err)
			}
			f.purge = tc.steps
			res, err := store.Purge(context.Background())
			if (err != nil) != (tc.wantErr != nil) {
				t.Fatalf("Purge error = %v, want error: %v", err, tc.wantErr != nil)
			}
			if res.Deleted != tc.wantDeleted || res.Batches != tc.wantBatches {
				t.Errorf("Purge = %+v, want %d deleted in %d batches", res, tc.wantDeleted, tc.wantBatches)
			}
			if len(f.purges) != len(tc.steps) {
				t.Errorf("PurgeBatch ran %d times, want %d", len(f.purges), len(tc.steps))
			}
			for i, a := range f.purges {
				if a.Limit != tc.batch {
					t.Errorf("batch %d: Limit %d, want %d", i+1, a.Limit, tc.batch)
				}
			}
			for _, tx := range f.txs {
				if tx.opts.Isolation != sql.LevelReadCommitted {
					t.Errorf("transaction %d begun at %v, want READ COMMITTED", tx.n, tx.opts.Isolation)
				}
			}
			if len(f.txs) != len(tc.steps) {
				t.Errorf("%d transactions for %d batches: the core must begin one per batch attempt", len(f.txs), len(tc.steps))
			}
			if f.openTxs() != 0 {
				t.Errorf("%d transactions left open", f.openTxs())
			}
		})
	}
}

// TestPurgeDutyCycle: Purge pauses after each full batch so that batches
// take only Config.PurgeDutyCycle of the time, and not after the last one.
func TestPurgeDutyCycle(t *testing.T) {
	const took = 20 * time.Millisecond
	steps := []purgeStep{{n: 5, took: took}, {n: 5, took: took}, {n: 1, took: took}}
	for _, tc := range []struct {
		duty     float64
		min, max time.Duration
	}{
		// 3 batches; 2 pauses of took*(1-d)/d.
		{1, 3 * took, 3*took + 150*time.Millisecond},
		{0.25, 3*took + 2*3*took, 3*took + 2*3*took + 300*time.Millisecond},
	} {
		store, f, err := newFakeStore(idem.Config{PurgeBatch: 5, PurgeDutyCycle: tc.duty})
		if err != nil {
			t.Fatal(err)
		}
		f.purge = steps
		start := time.Now()
		res, err := store.Purge(context.Background())
		elapsed := time.Since(start)
		if err != nil || res.Deleted != 11 {
			t.Fatalf("duty %v: Purge = %+v, %v", tc.duty, res, err)
		}
		if elapsed < tc.min || elapsed > tc.max {
			t.Errorf("duty %v: Purge took %v, want between %v and %v", tc.duty, elapsed, tc.min, tc.max)
		}
	}
	// A pause ends when the context does.
	store, f, err := newFakeStore(idem.Config{PurgeBatch: 5, PurgeDutyCycle: 0.01})
	if err != nil {
		t.Fatal(err)
	}
	f.purge = steps
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := store.Purge(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Purge with a context ending during a pause: %v, want DeadlineExceeded", err)
	}
	if elapsed := time.Since(start); elapsed > time.Second {
		t.Errorf("Purge returned %v after its context ended", elapsed-100*time.Millisecond)
	}
}

// TestDoIsolationOption: a call's Isolation reaches the driver's Begin; a
// call without one leaves the driver's default.
func TestDoIsolationOption(t *testing.T) {
	store, f, err := newFakeStore(idem.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ok := func(context.Context, *fakeTx) (idem.Response, error) { return idem.Response{Status: 201}, nil }
	if _, err := store.Do(t.Context(), fakeRequest("k1"), ok, idem.Isolation(sql.LevelSerializable)); err != nil {
		t.Fatal(err)
	}
	if _, err := store.Do(t.Context(), fakeRequest("k2"), ok); err != nil {
		t.Fatal(err)
	}
	if got := []sql.IsolationLevel{f.txs[0].opts.Isolation, f.txs[1].opts.Isolation}; got[0] != sql.LevelSerializable || got[1] != sql.LevelDefault {
		t.Errorf("Begin saw levels %v, want [Serializable Default]", got)
	}
}

// TestRetryable: which errors make another call with the same key worth it.
func TestRetryable(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"retries exhausted", &idem.RetryError{Attempts: 5, Err: idem.ErrDeadlock}, true},
		{"serialization", fmt.Errorf("x: %w", idem.ErrSerialization), true},
		{"deadlock", idem.ErrDeadlock, true},
		{"lock timeout", idem.ErrLockTimeout, true},
		{"unavailable", dialect.Classified(idem.ErrUnavailable, errors.New("conn reset")), true},
		{"commit unknown", idem.ErrCommitUnknown, true},
		{"invalid key", idem.ErrInvalidKey, false},
		{"too large", idem.ErrTooLarge, false},
		{"bad transaction", idem.ErrBadTx, false},
		{"unique violation", idem.ErrUniqueViolation, false},
		{"function's own error", errors.New("card declined"), false},
		{"cancelled", fmt.Errorf("%w: %w", context.Canceled, idem.ErrLockTimeout), false},
		{"deadline", context.DeadlineExceeded, false},
		// A COMMIT interrupted by an ended context: the driver's error
		// holds the context's, and the outcome is still unknown.
		{"commit unknown, context cancelled", fmt.Errorf("%w: %w", context.Canceled, dialect.Classified(idem.ErrCommitUnknown, context.Canceled)), true},
		{"commit unknown, deadline", dialect.Classified(idem.ErrCommitUnknown, context.DeadlineExceeded), true},
		{"commit timeout", fmt.Errorf("%w: %w: COMMIT not sent", idem.ErrCommitTimeout, context.DeadlineExceeded), true},
	} {
		if got := idem.Retryable(tc.err); got != tc.want {
			t.Errorf("Retryable(%s: %v) = %v, want %v", tc.name, tc.err, got, tc.want)
		}
	}
}
