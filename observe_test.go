package idem_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/dialect"
)

// recorder is an Observer and DoObserver that keeps every event.
type recorder struct {
	mu     sync.Mutex
	events []idem.Event
	starts int
	ends   []idem.Outcome
}

type startKey struct{}

func (r *recorder) Observe(ctx context.Context, e idem.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e.Kind == idem.EventClaim && ctx.Value(startKey{}) == nil && !e.ReadFirst {
		// Do's claims run in the context StartDo returned.
		e.Err = errors.New("claim outside StartDo's context")
	}
	r.events = append(r.events, e)
}

func (r *recorder) StartDo(ctx context.Context, req idem.Request) (context.Context, func(idem.Result, error)) {
	r.mu.Lock()
	r.starts++
	r.mu.Unlock()
	return context.WithValue(ctx, startKey{}, true), func(res idem.Result, err error) {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.ends = append(r.ends, res.Outcome)
	}
}

func (r *recorder) of(kind idem.EventKind) []idem.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []idem.Event
	for _, e := range r.events {
		if e.Kind == kind {
			out = append(out, e)
		}
	}
	return out
}

// logLines decodes the JSON lines a slog.JSONHandler wrote.
func logLines(t *testing.T, b *bytes.Buffer) []map[string]any {
	t.Helper()
	var out []map[string]any
	dec := json.NewDecoder(b)
	for dec.More() {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			t.Fatal(err)
		}
		out = append(out, m)
	}
	return out
}

func TestObserverEvents(t *testing.T) {
	req := fakeRequest("k1")
	ok := idem.Response{Status: http.StatusCreated, Header: http.Header{"A": {"b"}}, Body: []byte("created")}
	completed := dialect.Record{Scope: req.Scope, Key: req.Key, Fingerprint: req.Fingerprint[:], State: dialect.Completed, Status: 201, Header: []byte{}, Body: []byte("x")}
	mismatched := completed
	other := idem.FingerprintRequest("POST", "/orders", []byte("another body"))
	mismatched.Fingerprint = other[:]

	t.Run("won stores and ends", func(t *testing.T) {
		rec := &recorder{}
		s, _, err := newFakeStore(idem.Config{Observer: rec})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Do(context.Background(), req, func(context.Context, *fakeTx) (idem.Response, error) { return ok, nil }); err != nil {
			t.Fatal(err)
		}
		claims, stored := rec.of(idem.EventClaim), rec.of(idem.EventStored)
		if len(claims) != 1 || claims[0].Outcome != idem.Won || claims[0].Err != nil || claims[0].Key != req.Key || claims[0].Table != idem.DefaultTable {
			t.Errorf("claim events %+v, want one won in Do's context", claims)
		}
		if len(stored) != 1 || stored[0].BodyBytes != len(ok.Body) || stored[0].Status != 201 || stored[0].HeaderBytes == 0 {
			t.Errorf("stored events %+v, want one of %d body bytes", stored, len(ok.Body))
		}
		if rec.starts != 1 || len(rec.ends) != 1 || rec.ends[0] != idem.Won {
			t.Errorf("StartDo %d times, ends %v, want once, won", rec.starts, rec.ends)
		}
	})

	t.Run("a loser's wait", func(t *testing.T) {
		rec := &recorder{}
		s, f, err := newFakeStore(idem.Config{Observer: rec})
		if err != nil {
			t.Fatal(err)
		}
		const held = 30 * time.Millisecond
		f.claim = func(context.Context, int, dialect.ClaimArgs) (dialect.ClaimResult, error) {
			time.Sleep(held) // waiting for the holder to commit
			return dialect.ClaimResult{Record: completed}, nil
		}
		res, err := s.Do(context.Background(), req, func(context.Context, *fakeTx) (idem.Response, error) { return ok, nil })
		if err != nil || res.Outcome != idem.Replay {
			t.Fatalf("Do: %v, %v", res.Outcome, err)
		}
		claims := rec.of(idem.EventClaim)
		if len(claims) != 1 || claims[0].Outcome != idem.Replay || claims[0].Wait < held {
			t.Errorf("claim events %+v, want one replay that waited at least %v", claims, held)
		}
		if len(rec.of(idem.EventStored)) != 0 {
			t.Error("a replay reported a stored response")
		}
	})

	t.Run("lock timeout is in flight", func(t *testing.T) {
		rec := &recorder{}
		s, f, err := newFakeStore(idem.Config{Observer: rec})
		if err != nil {
			t.Fatal(err)
		}
		f.claim = func(context.Context, int, dialect.ClaimArgs) (dialect.ClaimResult, error) {
			return dialect.ClaimResult{}, errRawLockTimeout
		}
		if res, err := s.Do(context.Background(), req, func(context.Context, *fakeTx) (idem.Response, error) { return ok, nil }); err != nil || res.Outcome != idem.InFlight {
			t.Fatalf("Do: %v, %v", res.Outcome, err)
		}
		if claims := rec.of(idem.EventClaim); len(claims) != 1 || claims[0].Outcome != idem.InFlight {
			t.Errorf("claim events %+v, want one in-flight", claims)
		}
	})

	t.Run("retries by cause", func(t *testing.T) {
		rec := &recorder{}
		s, f, err := newFakeStore(idem.Config{Observer: rec})
		if err != nil {
			t.Fatal(err)
		}
		f.claim = func(_ context.Context, n int, _ dialect.ClaimArgs) (dialect.ClaimResult, error) {
			switch n {
			case 1:
				return dialect.ClaimResult{}, errRawSerialization
			case 2:
				return dialect.ClaimResult{}, errRawDeadlock
			case 3:
				return dialect.ClaimResult{}, errRawConnLost
			}
			return dialect.ClaimResult{Won: true}, nil
		}
		if _, err := s.Do(context.Background(), req, func(context.Context, *fakeTx) (idem.Response, error) { return ok, nil }); err != nil {
			t.Fatal(err)
		}
		retries := rec.of(idem.EventRetry)
		var causes []string
		for i, e := range retries {
			causes = append(causes, e.Cause)
			if e.Attempt != i+1 || e.Err == nil || e.Key != req.Key {
				t.Errorf("retry %d: %+v", i+1, e)
			}
		}
		if want := []string{"serialization", "deadlock", "unavailable"}; len(causes) != 3 || causes[0] != want[0] || causes[1] != want[1] || causes[2] != want[2] {
			t.Errorf("retry causes %v, want %v", causes, want)
		}
	})

	t.Run("the last attempt is not a retry", func(t *testing.T) {
		rec := &recorder{}
		s, f, err := newFakeStore(idem.Config{Observer: rec, MaxAttempts: 2})
		if err != nil {
			t.Fatal(err)
		}
		f.claim = func(context.Context, int, dialect.ClaimArgs) (dialect.ClaimResult, error) {
			return dialect.ClaimResult{}, errRawSerialization
		}
		if _, err := s.Do(context.Background(), req, func(context.Context, *fakeTx) (idem.Response, error) { return ok, nil }); !errors.Is(err, idem.ErrRetriesExhausted) {
			t.Fatal(err)
		}
		if n := len(rec.of(idem.EventRetry)); n != 1 {
			t.Errorf("%d retry events for 2 attempts, want 1", n)
		}
	})

	t.Run("mismatch and commit unknown are logged", func(t *testing.T) {
		rec := &recorder{}
		var logs bytes.Buffer
		logger := slog.New(slog.NewJSONHandler(&logs, nil))
		s, f, err := newFakeStore(idem.Config{Observer: rec, Logger: logger})
		if err != nil {
			t.Fatal(err)
		}
		f.claim = func(context.Context, int, dialect.ClaimArgs) (dialect.ClaimResult, error) {
			return dialect.ClaimResult{Record: mismatched}, nil
		}
		if res, err := s.Do(context.Background(), req, func(context.Context, *fakeTx) (idem.Response, error) { return ok, nil }); err != nil || res.Outcome != idem.Mismatch {
			t.Fatalf("Do: %v, %v", res.Outcome, err)
		}
		f.claim = nil
		f.commitErr = errRawCommitLost
		if _, err := s.Do(context.Background(), req, func(context.Context, *fakeTx) (idem.Response, error) { return ok, nil }); !errors.Is(err, idem.ErrCommitUnknown) {
			t.Fatalf("Do: %v, want ErrCommitUnknown", err)
		}
		if n := len(rec.of(idem.EventCommitUnknown)); n != 1 {
			t.Errorf("%d commit-unknown events, want 1", n)
		}
		lines := logLines(t, &logs)
		if len(lines) != 2 {
			t.Fatalf("log lines %v, want a mismatch and a commit-unknown", lines)
		}
		if lines[0]["level"] != "WARN" || lines[0]["key"] != req.Key || lines[0]["scope"] != req.Scope || lines[0]["table"] != idem.DefaultTable {
			t.Errorf("mismatch log line %v", lines[0])
		}
		if lines[1]["level"] != "ERROR" || lines[1]["key"] != req.Key || lines[1]["error"] == nil {
			t.Errorf("commit-unknown log line %v", lines[1])
		}
	})

	t.Run("read first", func(t *testing.T) {
		rec := &recorder{}
		s, f, err := newFakeStore(idem.Config{Observer: rec, ReadFirst: idem.ReadFirstAlways})
		if err != nil {
			t.Fatal(err)
		}
		f.lookup = func(dialect.LookupArgs) (dialect.Record, bool, error) { return completed, true, nil }
		if res, err := s.Do(context.Background(), req, func(context.Context, *fakeTx) (idem.Response, error) { return ok, nil }); err != nil || res.Outcome != idem.Replay {
			t.Fatalf("Do: %v, %v", res.Outcome, err)
		}
		if claims := rec.of(idem.EventClaim); len(claims) != 1 || !claims[0].ReadFirst || claims[0].Outcome != idem.Replay {
			t.Errorf("claim events %+v, want one replay answered by the read", claims)
		}
	})

	t.Run("purge", func(t *testing.T) {
		rec := &recorder{}
		var logs bytes.Buffer
		s, f, err := newFakeStore(idem.Config{Observer: rec, PurgeBatch: 5, PurgeDutyCycle: 1, Logger: slog.New(slog.NewJSONHandler(&logs, nil))})
		if err != nil {
			t.Fatal(err)
		}
		f.purge = []purgeStep{{n: 5}, {n: 5}, {n: 2}}
		if _, err := s.Purge(context.Background()); err != nil {
			t.Fatal(err)
		}
		batches, purges := rec.of(idem.EventPurgeBatch), rec.of(idem.EventPurge)
		if len(batches) != 3 || batches[0].Rows != 5 || batches[2].Rows != 2 || batches[2].Batches != 3 {
			t.Errorf("batch events %+v, want 5, 5, 2", batches)
		}
		if len(purges) != 1 || purges[0].Rows != 12 || purges[0].Batches != 3 || purges[0].Duration <= 0 || purges[0].Err != nil {
			t.Errorf("purge events %+v, want one of 12 rows in 3 batches", purges)
		}
		lines := logLines(t, &logs)
		if len(lines) != 1 || lines[0]["msg"] != "idem: purge" || lines[0]["deleted"] != float64(12) || lines[0]["batches"] != float64(3) {
			t.Errorf("purge log %v, want one summary", lines)
		}
	})
}

// TestObserverOffAllocatesNothing: a disabled logger and a no-op observer
// add no allocation to Do, on the paths that emit events.
func TestObserverOffAllocatesNothing(t *testing.T) {
	req := fakeRequest("k1")
	other := idem.FingerprintRequest("POST", "/orders", []byte("another body"))
	mismatched := dialect.Record{Scope: req.Scope, Key: req.Key, Fingerprint: other[:], State: dialect.Completed, Status: 201, Header: []byte{}, Body: []byte("x")}
	fn := func(context.Context, *fakeTx) (idem.Response, error) { return idem.Response{Status: 201}, nil }
	quiet := slog.New(slog.NewJSONHandler(&bytes.Buffer{}, &slog.HandlerOptions{Level: slog.LevelError + 1}))
	allocs := func(cfg idem.Config, mismatch bool) float64 {
		// Every call decided by the claim: ReadFirstAuto would switch to
		// reading first partway through a run of mismatches, and where it
		// switches would move the averages this test compares.
		cfg.ReadFirst = idem.ReadFirstNever
		s, f, err := newFakeStore(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if mismatch {
			f.claim = func(context.Context, int, dialect.ClaimArgs) (dialect.ClaimResult, error) {
				return dialect.ClaimResult{Record: mismatched}, nil
			}
		}
		return testing.AllocsPerRun(200, func() {
			if _, err := s.Do(context.Background(), req, fn); err != nil {
				t.Fatal(err)
			}
		})
	}
	for _, mismatch := range []bool{false, true} {
		base := allocs(idem.Config{}, mismatch)
		if got := allocs(idem.Config{Logger: quiet}, mismatch); got != base {
			t.Errorf("mismatch=%v: Do with a disabled logger allocates %v times, without one %v", mismatch, got, base)
		}
		if got := allocs(idem.Config{Observer: nopObserver{}}, mismatch); got != base {
			t.Errorf("mismatch=%v: Do with a no-op observer allocates %v times, without one %v", mismatch, got, base)
		}
	}
}

type nopObserver struct{}

func (nopObserver) Observe(context.Context, idem.Event) {}
