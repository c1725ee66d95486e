package conformance

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"testing"
	"time"

	"github.com/idemkit/idem"
)

func created(body string) idem.Response {
	return idem.Response{
		Status: http.StatusCreated,
		Header: http.Header{"Content-Type": {"application/json"}, "Location": {"/orders/1"}},
		Body:   []byte(body),
	}
}

// sameResponse compares status, every header value in order, and the body
// byte for byte.
func sameResponse(a, b idem.Response) bool {
	if a.Status != b.Status || !bytes.Equal(a.Body, b.Body) || len(a.Header) != len(b.Header) {
		return false
	}
	for name, values := range a.Header {
		if !reflect.DeepEqual(values, b.Header[name]) {
			return false
		}
	}
	return true
}

func testFreshClaimAndComplete[TTx any](t *testing.T, b Backend[TTx]) {
	e := setup(t, b, idem.Config{})
	req := request("fresh-1", `{"item":88}`)
	txn := e.Begin()
	defer txn.Rollback(e.Ctx)
	claim, err := e.Store.Claim(e.Ctx, txn.Native(), req)
	if err != nil {
		e.Fatalf(req.Key, "Claim: %v", err)
	}
	if claim.Outcome != idem.Won {
		e.Fatalf(req.Key, "fresh claim: outcome %v, want won", claim.Outcome)
	}
	if err := e.effect(e.Ctx, txn.Native(), "fresh-1"); err != nil {
		e.Fatalf(req.Key, "effect: %v", err)
	}
	resp := created(`{"id":1}`)
	if err := claim.Complete(e.Ctx, resp); err != nil {
		e.Fatalf(req.Key, "Complete: %v", err)
	}
	// Before commit, nothing is visible outside the transaction.
	if _, err := e.Store.Lookup(e.Ctx, req.Scope, req.Key); !errors.Is(err, idem.ErrNotFound) {
		e.Fatalf(req.Key, "Lookup before commit: %v, want ErrNotFound", err)
	}
	if err := txn.Commit(e.Ctx); err != nil {
		e.Fatalf(req.Key, "Commit: %v", err)
	}
	rec, err := e.Store.Lookup(e.Ctx, req.Scope, req.Key)
	if err != nil {
		e.Fatalf(req.Key, "Lookup: %v", err)
	}
	if !rec.Completed || !sameResponse(rec.Response, resp) || rec.Fingerprint != req.Fingerprint {
		e.Fatalf(req.Key, "stored record %+v, want completed with %+v", rec, resp)
	}
	if n := e.effectCount("fresh-1"); n != 1 {
		e.Fatalf(req.Key, "effects = %d, want 1", n)
	}
}

func testDoWinsAndCommits[TTx any](t *testing.T, b Backend[TTx]) {
	e := setup(t, b, idem.Config{})
	req := request("do-1", "a")
	resp := created("one")
	res := e.do(e.Store, req, e.work("do-1", resp))
	if res.Outcome != idem.Won || !res.Committed || !sameResponse(res.Response, resp) {
		e.Fatalf(req.Key, "Do: %+v, want won, committed, %+v", res, resp)
	}
	if n := e.effectCount("do-1"); n != 1 {
		e.Fatalf(req.Key, "effects = %d, want 1", n)
	}
	if n := e.Records(); n != 1 {
		e.Fatalf(req.Key, "records = %d, want 1", n)
	}
}

func testReplayByteForByte[TTx any](t *testing.T, b Backend[TTx]) {
	e := setup(t, b, idem.Config{})
	body := make([]byte, 256*4)
	for i := range body {
		body[i] = byte(i)
	}
	resp := idem.Response{
		Status: http.StatusCreated,
		Header: http.Header{
			"Location":     {"/orders/7"},
			"X-Multi":      {"zeta", "alpha", "", "mid dle", "alpha"},
			"Content-Type": {"application/octet-stream"},
			"X-Empty":      {},
		},
		Body: body,
	}
	req := request("replay-1", "payload")
	first := e.do(e.Store, req, e.work("replay-1", resp))
	if first.Outcome != idem.Won {
		e.Fatalf(req.Key, "first Do: outcome %v", first.Outcome)
	}
	for i := 0; i < 2; i++ {
		called := false
		res := e.do(e.Store, req, func(ctx context.Context, tx TTx) (idem.Response, error) {
			called = true
			return idem.Response{Status: 500}, nil
		})
		if called {
			e.Fatalf(req.Key, "replay %d ran the function", i)
		}
		if res.Outcome != idem.Replay || res.Committed {
			e.Fatalf(req.Key, "replay %d: outcome %v committed %v, want replay", i, res.Outcome, res.Committed)
		}
		if !sameResponse(res.Response, resp) {
			e.Fatalf(req.Key, "replay %d differs:\n got  %d %v %x\n want %d %v %x", i,
				res.Response.Status, res.Response.Header, res.Response.Body, resp.Status, resp.Header, resp.Body)
		}
	}
	if n := e.effectCount("replay-1"); n != 1 {
		e.Fatalf(req.Key, "effects = %d, want 1", n)
	}
}

func testReplayEmptyBody[TTx any](t *testing.T, b Backend[TTx]) {
	e := setup(t, b, idem.Config{})
	req := request("empty-1", "")
	resp := idem.Response{Status: http.StatusNoContent}
	e.do(e.Store, req, e.work("empty-1", resp))
	res := e.do(e.Store, req, e.work("empty-1", idem.Response{Status: 200, Body: []byte("x")}))
	if res.Outcome != idem.Replay || res.Response.Status != http.StatusNoContent || len(res.Response.Body) != 0 || len(res.Response.Header) != 0 {
		e.Fatalf(req.Key, "replay of empty response: %+v", res)
	}
	if res.Response.Body == nil {
		e.Fatalf(req.Key, "replayed empty body is nil, want an empty slice")
	}
}

// testNoStatusReplays: work without an HTTP status (a consumed message)
// stores Status 0 ("done") with its payload, and replays both; a stored 0
// is completed, not pending. Done without a payload replays an empty body.
func testNoStatusReplays[TTx any](t *testing.T, b Backend[TTx]) {
	e := setup(t, b, idem.Config{})
	readFirst, err := idem.New(e.Driver, idem.Config{Table: e.Table, WaitBound: DefaultWaitBound, ReadFirst: idem.ReadFirstAlways})
	if err != nil {
		e.Fatalf("", "idem.New with ReadFirst: %v", err)
	}
	for _, tc := range []struct {
		key  string
		resp idem.Response
	}{
		{"nostatus-payload", idem.Response{Status: idem.NoStatus, Body: []byte(`{"order":42}`)}},
		{"nostatus-empty", idem.Response{Status: idem.NoStatus}},
	} {
		req := request(tc.key, "message")
		first := e.do(e.Store, req, e.work(tc.key, tc.resp))
		if first.Outcome != idem.Won || !first.Committed || first.Response.Status != 0 {
			e.Fatalf(req.Key, "first Do: %+v, want won, committed, status 0", first)
		}
		rec, err := e.Store.Lookup(e.Ctx, req.Scope, req.Key)
		if err != nil || !rec.Completed || rec.Response.Status != 0 {
			e.Fatalf(req.Key, "Lookup: %+v, %v; want a completed record with status 0", rec, err)
		}
		for _, s := range []*idem.Store[TTx]{e.Store, readFirst} {
			res := e.do(s, req, e.work(tc.key, created("again")))
			if res.Outcome != idem.Replay || res.Response.Status != 0 || !bytes.Equal(res.Response.Body, tc.resp.Body) ||
				res.Response.Body == nil || len(res.Response.Header) != 0 {
				e.Fatalf(req.Key, "replay: %v status %d header %v body %q, want replay status 0 body %q",
					res.Outcome, res.Response.Status, res.Response.Header, res.Response.Body, tc.resp.Body)
			}
		}
		if n := e.effectCount(tc.key); n != 1 {
			e.Fatalf(req.Key, "effects = %d, want 1", n)
		}
	}
}

func testMismatch[TTx any](t *testing.T, b Backend[TTx]) {
	e := setup(t, b, idem.Config{})
	req := request("mismatch-1", `{"amount":100}`)
	e.do(e.Store, req, e.work("mismatch-1", created("first")))
	other := request("mismatch-1", `{"amount":999}`)
	res := e.do(e.Store, other, e.work("mismatch-1", created("second")))
	if res.Outcome != idem.Mismatch || res.Committed {
		e.Fatalf(req.Key, "same key, other body: outcome %v, want mismatch", res.Outcome)
	}
	if res.Record.Fingerprint != req.Fingerprint {
		e.Fatalf(req.Key, "mismatch reports fingerprint %x, want the stored %x", res.Record.Fingerprint, req.Fingerprint)
	}
	if n := e.effectCount("mismatch-1"); n != 1 {
		e.Fatalf(req.Key, "effects = %d, want 1", n)
	}
	// The original still replays.
	if res := e.do(e.Store, req, e.work("mismatch-1", created("x"))); res.Outcome != idem.Replay || string(res.Response.Body) != "first" {
		e.Fatalf(req.Key, "original after mismatch: %v %q", res.Outcome, res.Response.Body)
	}
}

func testScopesIsolateKeys[TTx any](t *testing.T, b Backend[TTx]) {
	e := setup(t, b, idem.Config{})
	a := request("shared-key", "a")
	a.Scope = "tenant-a POST /orders"
	c := request("shared-key", "c")
	c.Scope = "tenant-c POST /orders"
	ra := e.do(e.Store, a, e.workIn(a.Scope, "scope-a", created("for a")))
	rc := e.do(e.Store, c, e.workIn(c.Scope, "scope-c", created("for c")))
	if ra.Outcome != idem.Won || rc.Outcome != idem.Won {
		e.Fatalf(a.Key, "two scopes: outcomes %v and %v, want both won", ra.Outcome, rc.Outcome)
	}
	if r := e.do(e.Store, a, e.workIn(a.Scope, "scope-a", created("again"))); r.Outcome != idem.Replay || string(r.Response.Body) != "for a" {
		e.Fatalf(a.Key, "scope a replay: %v %q", r.Outcome, r.Response.Body)
	}
	if r := e.do(e.Store, c, e.workIn(c.Scope, "scope-c", created("again"))); r.Outcome != idem.Replay || string(r.Response.Body) != "for c" {
		e.Fatalf(c.Key, "scope c replay: %v %q", r.Outcome, r.Response.Body)
	}
	rec, err := e.Store.Lookup(e.Ctx, a.Scope, a.Key)
	if err != nil || string(rec.Response.Body) != "for a" {
		e.Fatalf(a.Key, "Lookup in scope a: %v %q", err, rec.Response.Body)
	}
	if e.effectCount("scope-a") != 1 || e.effectCount("scope-c") != 1 {
		e.Fatalf(a.Key, "effects: a=%d c=%d, want 1 each", e.effectCount("scope-a"), e.effectCount("scope-c"))
	}
}

func testFuncErrorRollsBack[TTx any](t *testing.T, b Backend[TTx]) {
	e := setup(t, b, idem.Config{})
	req := request("fnerr-1", "x")
	boom := errors.New("payment provider said no")
	_, err := e.Store.Do(e.Ctx, req, func(ctx context.Context, tx TTx) (idem.Response, error) {
		if err := e.effect(ctx, tx, "fnerr-1"); err != nil {
			return idem.Response{}, err
		}
		return idem.Response{}, boom
	})
	if err != boom {
		e.Fatalf(req.Key, "Do returned %v, want the function's error unchanged", err)
	}
	if _, err := e.Store.Lookup(e.Ctx, req.Scope, req.Key); !errors.Is(err, idem.ErrNotFound) {
		e.Fatalf(req.Key, "after function error, Lookup: %v, want ErrNotFound", err)
	}
	if n := e.Records(); n != 0 {
		e.Fatalf(req.Key, "records = %d after rollback, want 0", n)
	}
	if n := e.effectCount("fnerr-1"); n != 0 {
		e.Fatalf(req.Key, "effects = %d after rollback, want 0", n)
	}
	res := e.do(e.Store, req, e.work("fnerr-1", created("ok")))
	if res.Outcome != idem.Won || !res.Committed {
		e.Fatalf(req.Key, "claim after rollback: %v, want won", res.Outcome)
	}
	if n := e.effectCount("fnerr-1"); n != 1 {
		e.Fatalf(req.Key, "effects = %d, want 1", n)
	}
}

func testPanicRollsBack[TTx any](t *testing.T, b Backend[TTx]) {
	e := setup(t, b, idem.Config{})
	req := request("panic-1", "x")
	func() {
		defer func() {
			if r := recover(); r != "handler bug" {
				e.Fatalf(req.Key, "recovered %v, want the function's panic", r)
			}
		}()
		_, _ = e.Store.Do(e.Ctx, req, func(ctx context.Context, tx TTx) (idem.Response, error) {
			if err := e.effect(ctx, tx, "panic-1"); err != nil {
				return idem.Response{}, err
			}
			panic("handler bug")
		})
	}()
	if n := e.Records() + e.effectCount("panic-1"); n != 0 {
		e.Fatalf(req.Key, "rows after panic = %d, want 0", n)
	}
	if res := e.do(e.Store, req, e.work("panic-1", created("ok"))); res.Outcome != idem.Won {
		e.Fatalf(req.Key, "claim after panic: %v, want won", res.Outcome)
	}
}

func testServerErrorNotStored[TTx any](t *testing.T, b Backend[TTx]) {
	e := setup(t, b, idem.Config{})
	req := request("5xx-1", "x")
	res := e.do(e.Store, req, e.work("5xx-1", idem.Response{Status: 503, Body: []byte("try later")}))
	if res.Outcome != idem.Won || res.Committed || res.Response.Status != 503 {
		e.Fatalf(req.Key, "5xx: %+v, want won, not committed, 503", res)
	}
	if n := e.Records() + e.effectCount("5xx-1"); n != 0 {
		e.Fatalf(req.Key, "rows after 5xx = %d, want 0 (rolled back)", n)
	}
	res = e.do(e.Store, req, e.work("5xx-1", created("done")))
	if res.Outcome != idem.Won || !res.Committed {
		e.Fatalf(req.Key, "retry after 5xx: %v, want won", res.Outcome)
	}
}

func testServerErrorStoredByPolicy[TTx any](t *testing.T, b Backend[TTx]) {
	e := setup(t, b, idem.Config{StoreStatus: func(int) bool { return true }})
	req := request("5xx-2", "x")
	res := e.do(e.Store, req, e.work("5xx-2", idem.Response{Status: 500, Body: []byte("kept")}))
	if !res.Committed {
		e.Fatalf(req.Key, "5xx with StoreStatus storing everything: not committed")
	}
	res = e.do(e.Store, req, e.work("5xx-2", created("other")))
	if res.Outcome != idem.Replay || res.Response.Status != 500 || string(res.Response.Body) != "kept" {
		e.Fatalf(req.Key, "replay of stored 5xx: %v %d %q", res.Outcome, res.Response.Status, res.Response.Body)
	}
}

func testAbandonedClaim[TTx any](t *testing.T, b Backend[TTx]) {
	e := setup(t, b, idem.Config{})
	req := request("abandoned-1", "x")
	txn := e.Begin()
	claim, err := e.Store.Claim(e.Ctx, txn.Native(), req)
	if err != nil || claim.Outcome != idem.Won {
		e.Fatalf(req.Key, "Claim: %v %v", claim, err)
	}
	if err := txn.Commit(e.Ctx); err != nil { // a caller bug: committed without Complete
		e.Fatalf(req.Key, "Commit: %v", err)
	}
	res := e.do(e.Store, req, e.work("abandoned-1", created("x")))
	if res.Outcome != idem.InFlight || res.Record.Completed || res.Record.Key != req.Key {
		e.Fatalf(req.Key, "claim of a committed in-flight record: %+v, want in-flight", res)
	}
	if n := e.effectCount("abandoned-1"); n != 0 {
		e.Fatalf(req.Key, "effects = %d, want 0", n)
	}
}

func testLookup[TTx any](t *testing.T, b Backend[TTx]) {
	e := setup(t, b, idem.Config{})
	req := request("lookup-1", "x")
	if _, err := e.Store.Lookup(e.Ctx, req.Scope, req.Key); !errors.Is(err, idem.ErrNotFound) {
		e.Fatalf(req.Key, "Lookup of unknown key: %v, want ErrNotFound", err)
	}
	resp := created("looked up")
	e.do(e.Store, req, e.work("lookup-1", resp))
	rec, err := e.Store.Lookup(e.Ctx, req.Scope, req.Key)
	if err != nil {
		e.Fatalf(req.Key, "Lookup: %v", err)
	}
	if rec.Scope != req.Scope || rec.Key != req.Key || !rec.Completed || !sameResponse(rec.Response, resp) {
		e.Fatalf(req.Key, "Lookup: %+v", rec)
	}
	if !rec.ExpiresAt.After(rec.CreatedAt) {
		e.Fatalf(req.Key, "Lookup: expires %v not after created %v", rec.ExpiresAt, rec.CreatedAt)
	}
	if _, err := e.Store.Lookup(e.Ctx, "other scope", req.Key); !errors.Is(err, idem.ErrNotFound) {
		e.Fatalf(req.Key, "Lookup in another scope: %v, want ErrNotFound", err)
	}
	if _, err := e.Store.Lookup(e.Ctx, req.Scope, ""); !errors.Is(err, idem.ErrInvalidKey) {
		e.Fatalf(req.Key, "Lookup with empty key: %v, want ErrInvalidKey", err)
	}
}

func testDatabaseClock[TTx any](t *testing.T, b Backend[TTx]) {
	const retention = 90 * time.Minute
	e := setup(t, b, idem.Config{Retention: retention})
	req := request("dbclock-1", "x")
	before := time.Now()
	// In flight, the record expires the retention and its grace after its
	// claim.
	lives := retention + idem.ExpiryGrace(retention)
	txn := e.Begin()
	defer txn.Rollback(e.Ctx)
	claim, err := e.Store.Claim(e.Ctx, txn.Native(), req)
	if err != nil || claim.Outcome != idem.Won {
		e.Fatalf(req.Key, "Claim: %+v, %v", claim, err)
	}
	if err := txn.Commit(e.Ctx); err != nil {
		e.Fatalf(req.Key, "Commit of the claim: %v", err)
	}
	inFlight := e.rawRecord(req)
	// The database runs on this machine's clock (containers share the kernel's).
	if d := inFlight.CreatedAt.Sub(before); d < -5*time.Second || d > time.Minute {
		e.Fatalf(req.Key, "created_at %v is %v from the test's clock", inFlight.CreatedAt, d)
	}
	if got := inFlight.ExpiresAt.Sub(inFlight.CreatedAt); got != lives {
		e.Fatalf(req.Key, "in flight: expires - created = %v, want the retention and its grace %v", got, lives)
	}
	// Completed within the grace, the expiry stays where the claim set it.
	other := request("dbclock-2", "x")
	e.do(e.Store, other, e.work("dbclock-2", created("x")))
	done, err := e.Store.Lookup(e.Ctx, other.Scope, other.Key)
	if err != nil {
		e.Fatalf(other.Key, "Lookup: %v", err)
	}
	if got := done.ExpiresAt.Sub(done.CreatedAt); got != lives {
		e.Fatalf(other.Key, "completed: expires - created = %v, want the retention and its grace %v", got, lives)
	}
}

// rawRecord reads a record, in flight or not, through the store's Lookup.
func (e *env[TTx]) rawRecord(req idem.Request) idem.Record {
	e.T.Helper()
	rec, err := e.Store.Lookup(e.Ctx, req.Scope, req.Key)
	if err != nil {
		e.Fatalf(req.Key, "Lookup: %v", err)
	}
	return rec
}

// testLookupInTransaction: LookupTx reads in the caller's transaction: it
// sees a claim the transaction itself made, and a record committed before.
func testLookupInTransaction[TTx any](t *testing.T, b Backend[TTx]) {
	e := setup(t, b, idem.Config{})
	done := request("lookup-tx-done", "x")
	e.do(e.Store, done, e.work("lookup-tx-done", created("stored")))
	mine := request("lookup-tx-mine", "x")
	tx := e.Begin()
	defer tx.Rollback(e.Ctx)
	if c, err := e.Store.Claim(e.Ctx, tx.Native(), mine); err != nil || c.Outcome != idem.Won {
		e.Fatalf(mine.Key, "Claim: %+v, %v", c, err)
	}
	rec, err := e.Store.LookupTx(e.Ctx, tx.Native(), mine.Scope, mine.Key)
	if err != nil || rec.Completed || rec.Fingerprint != mine.Fingerprint {
		e.Fatalf(mine.Key, "LookupTx of the transaction's own claim: %+v, %v, want it pending", rec, err)
	}
	rec, err = e.Store.LookupTx(e.Ctx, tx.Native(), done.Scope, done.Key)
	if err != nil || !rec.Completed || string(rec.Response.Body) != "stored" {
		e.Fatalf(done.Key, "LookupTx of a committed record: %+v, %v", rec, err)
	}
	if _, err := e.Store.LookupTx(e.Ctx, tx.Native(), done.Scope, "absent"); !errors.Is(err, idem.ErrNotFound) {
		e.Fatalf("absent", "LookupTx of an absent key: %v, want ErrNotFound", err)
	}
	var zero TTx
	if _, err := e.Store.LookupTx(e.Ctx, zero, done.Scope, done.Key); !errors.Is(err, idem.ErrBadTx) {
		e.Fatalf(done.Key, "LookupTx with a nil transaction: %v, want ErrBadTx", err)
	}
}

// testPerCallIsolation: one store serves calls at every isolation level:
// a race of callers asking for SERIALIZABLE (whatever the driver's default)
// still has exactly one winner, whose losers wait for it and replay.
func testPerCallIsolation[TTx any](t *testing.T, b Backend[TTx]) {
	const n = 8
	e := setupObserved(t, b, idem.Config{MaxAttempts: 40})
	req := request("per-call-serializable", "x")
	e.contend(n, n-1, req, func(i int) idem.Func[TTx] { return e.work(req.Key, created(fmt.Sprintf("winner-%d", i))) },
		idem.Isolation(sql.LevelSerializable))
	if n := e.effectCount(req.Key); n != 1 {
		e.Fatalf(req.Key, "effects = %d, want 1", n)
	}
	if r := e.do(e.Store, req, e.work(req.Key, created("late")), idem.Isolation(sql.LevelReadCommitted)); r.Outcome != idem.Replay {
		e.Fatalf(req.Key, "a READ COMMITTED call after the race: %v, want replay", r.Outcome)
	}
}
