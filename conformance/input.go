package conformance

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/dialect"
)

func testBadRequestInput[TTx any](t *testing.T, b Backend[TTx]) {
	e := setup(t, b, idem.Config{})
	good := request("good-key", "x")
	for _, tc := range []struct {
		name  string
		scope string
		key   string
		want  error
	}{
		{"empty key", good.Scope, "", idem.ErrInvalidKey},
		{"key over 255 bytes", good.Scope, strings.Repeat("k", 256), idem.ErrInvalidKey},
		{"key with newline", good.Scope, "abc\ndef", idem.ErrInvalidKey},
		{"key with NUL", good.Scope, "abc\x00", idem.ErrInvalidKey},
		{"key with DEL", good.Scope, "abc\x7f", idem.ErrInvalidKey},
		{"key not ASCII", good.Scope, "clé", idem.ErrInvalidKey},
		{"empty scope", "", "k1", idem.ErrInvalidScope},
		{"scope over 255 bytes", strings.Repeat("s", 256), "k1", idem.ErrInvalidScope},
		{"scope with control", "tenant\t1", "k1", idem.ErrInvalidScope},
		{"scope not UTF-8", "tenant\xff", "k1", idem.ErrInvalidScope},
	} {
		req := idem.Request{Scope: tc.scope, Key: tc.key, Fingerprint: good.Fingerprint}
		called := false
		_, err := e.Store.Do(e.Ctx, req, func(ctx context.Context, tx TTx) (idem.Response, error) {
			called = true
			return created("x"), nil
		})
		if !errors.Is(err, tc.want) {
			e.Errorf(tc.key, "%s: Do returned %v, want %v", tc.name, err, tc.want)
		}
		if called {
			e.Errorf(tc.key, "%s: the function ran", tc.name)
		}
		txn := e.Begin()
		if _, err := e.Store.Claim(e.Ctx, txn.Native(), req); !errors.Is(err, tc.want) {
			e.Errorf(tc.key, "%s: Claim returned %v, want %v", tc.name, err, tc.want)
		}
		txn.Rollback(e.Ctx)
	}
	// The longest valid key and scope, with every printable ASCII byte, work.
	var printable strings.Builder
	for c := byte(0x20); c <= 0x7e; c++ {
		printable.WriteByte(c)
	}
	long := idem.Request{
		Scope:       strings.Repeat("ü", 127) + "s",
		Key:         (printable.String() + strings.Repeat("k", 255))[:255],
		Fingerprint: good.Fingerprint,
	}
	if r := e.do(e.Store, long, e.workIn(long.Scope, "long", created("x"))); r.Outcome != idem.Won {
		e.Fatalf(long.Key, "longest key and scope: %v, want won", r.Outcome)
	}
	if r := e.do(e.Store, long, e.workIn(long.Scope, "long", created("y"))); r.Outcome != idem.Replay {
		e.Fatalf(long.Key, "longest key and scope again: %v, want replay", r.Outcome)
	}
	// Keys are compared byte for byte: another case is another key.
	upper := long
	upper.Key = strings.ToUpper(long.Key)
	if r := e.do(e.Store, upper, e.workIn(upper.Scope, "long-upper", created("x"))); r.Outcome != idem.Won {
		e.Fatalf(upper.Key, "key differing only in case: %v, want won (keys are byte-exact)", r.Outcome)
	}
	if n := e.Records(); n != 2 {
		e.Fatalf(good.Key, "records = %d, want only the 2 valid ones", n)
	}
}

func testBadTableName[TTx any](t *testing.T, b Backend[TTx]) {
	d := b.Open(t)
	for _, name := range []string{
		"bad-name", "1starts_with_digit", "has space", `x"; DROP TABLE y; --`, "ünï", strings.Repeat("t", dialect.MaxIdentifier+1), "a.b",
	} {
		_, err := idem.New(d, idem.Config{Table: name})
		if !errors.Is(err, idem.ErrInvalidConfig) || !errors.Is(err, dialect.ErrInvalidIdentifier) {
			t.Errorf("[%s] table %q: New returned %v, want ErrInvalidConfig and ErrInvalidIdentifier", b.Name, name, err)
		}
	}
	if _, err := idem.New(d, idem.Config{Retention: -1}); !errors.Is(err, idem.ErrInvalidConfig) {
		t.Errorf("[%s] negative retention: %v, want ErrInvalidConfig", b.Name, err)
	}
}

func testResponseTooLarge[TTx any](t *testing.T, b Backend[TTx]) {
	const maxBody = 4096
	e := setup(t, b, idem.Config{MaxBody: maxBody})
	req := request("big-1", "x")
	_, err := e.Store.Do(e.Ctx, req, e.work("big-1", idem.Response{Status: 200, Body: make([]byte, maxBody+1)}))
	if !errors.Is(err, idem.ErrTooLarge) {
		e.Fatalf(req.Key, "body of %d bytes: %v, want ErrTooLarge", maxBody+1, err)
	}
	if n := e.Records() + e.effectCount("big-1"); n != 0 {
		e.Fatalf(req.Key, "rows after a too-large response = %d, want 0 (the effect rolled back)", n)
	}
	huge := idem.Response{Status: 200, Header: map[string][]string{"X-Big": {strings.Repeat("h", idem.MaxHeaderBytes)}}}
	if _, err := e.Store.Do(e.Ctx, req, e.work("big-1", huge)); !errors.Is(err, idem.ErrTooLarge) {
		e.Fatalf(req.Key, "oversized header: %v, want ErrTooLarge", err)
	}
	res := e.do(e.Store, req, e.work("big-1", idem.Response{Status: 200, Body: make([]byte, maxBody)}))
	if res.Outcome != idem.Won || !res.Committed {
		e.Fatalf(req.Key, "body of exactly %d bytes: %v, want won", maxBody, res.Outcome)
	}
	if r := e.do(e.Store, req, e.work("big-1", created("x"))); len(r.Response.Body) != maxBody {
		e.Fatalf(req.Key, "replayed body has %d bytes, want %d", len(r.Response.Body), maxBody)
	}
}

func testInvalidStatus[TTx any](t *testing.T, b Backend[TTx]) {
	e := setup(t, b, idem.Config{})
	for _, status := range []int{1, 99, 600, -1} {
		req := request("status-1", "x")
		if _, err := e.Store.Do(e.Ctx, req, e.work("status-1", idem.Response{Status: status})); !errors.Is(err, idem.ErrInvalidResponse) {
			e.Errorf(req.Key, "status %d: %v, want ErrInvalidResponse", status, err)
		}
	}
	if n := e.Records() + e.effectCount("status-1"); n != 0 {
		e.Fatalf("status-1", "rows = %d, want 0", n)
	}
}

func testCompleteWithoutWin[TTx any](t *testing.T, b Backend[TTx]) {
	e := setup(t, b, idem.Config{})
	req := request("notwon-1", "x")
	e.do(e.Store, req, e.work("notwon-1", created("first")))
	txn := e.Begin()
	defer txn.Rollback(e.Ctx)
	claim, err := e.Store.Claim(e.Ctx, txn.Native(), req)
	if err != nil || claim.Outcome != idem.Replay {
		e.Fatalf(req.Key, "second Claim: %+v, %v, want replay", claim, err)
	}
	if err := claim.Complete(e.Ctx, created("second")); !errors.Is(err, idem.ErrNotClaimed) {
		e.Fatalf(req.Key, "Complete after a lost claim: %v, want ErrNotClaimed", err)
	}
	if err := txn.Commit(e.Ctx); err != nil {
		e.Fatalf(req.Key, "Commit: %v", err)
	}
	rec, err := e.Store.Lookup(e.Ctx, req.Scope, req.Key)
	if err != nil || string(rec.Response.Body) != "first" {
		e.Fatalf(req.Key, "stored response %q, %v, want the first", rec.Response.Body, err)
	}
}

func testCompleteTwice[TTx any](t *testing.T, b Backend[TTx]) {
	e := setup(t, b, idem.Config{})
	req := request("twice-1", "x")
	txn := e.Begin()
	defer txn.Rollback(e.Ctx)
	claim, err := e.Store.Claim(e.Ctx, txn.Native(), req)
	if err != nil || claim.Outcome != idem.Won {
		e.Fatalf(req.Key, "Claim: %+v, %v", claim, err)
	}
	if err := claim.Complete(e.Ctx, created("first")); err != nil {
		e.Fatalf(req.Key, "Complete: %v", err)
	}
	if err := claim.Complete(e.Ctx, created("second")); !errors.Is(err, idem.ErrAlreadyCompleted) {
		e.Fatalf(req.Key, "second Complete: %v, want ErrAlreadyCompleted", err)
	}
	if err := txn.Commit(e.Ctx); err != nil {
		e.Fatalf(req.Key, "Commit: %v", err)
	}
	rec, err := e.Store.Lookup(e.Ctx, req.Scope, req.Key)
	if err != nil || string(rec.Response.Body) != "first" {
		e.Fatalf(req.Key, "stored %q, %v, want the first response", rec.Response.Body, err)
	}
}

func testNilTx[TTx any](t *testing.T, b Backend[TTx]) {
	e := setup(t, b, idem.Config{})
	var zero TTx
	req := request("niltx-1", "x")
	if _, err := e.Store.Claim(e.Ctx, zero, req); !errors.Is(err, idem.ErrBadTx) {
		e.Fatalf(req.Key, "Claim with a nil transaction: %v, want ErrBadTx", err)
	}
	if n := e.Records(); n != 0 {
		e.Fatalf(req.Key, "records = %d, want 0", n)
	}
}

func testFinishedTx[TTx any](t *testing.T, b Backend[TTx]) {
	e := setup(t, b, idem.Config{})
	req := request("donetx-1", "x")
	for _, commit := range []bool{true, false} {
		txn := e.Begin()
		if commit {
			if err := txn.Commit(e.Ctx); err != nil {
				e.Fatalf(req.Key, "Commit: %v", err)
			}
		} else if err := txn.Rollback(e.Ctx); err != nil {
			e.Fatalf(req.Key, "Rollback: %v", err)
		}
		if _, err := e.Store.Claim(e.Ctx, txn.Native(), req); !errors.Is(err, idem.ErrBadTx) || !errors.Is(err, idem.ErrTxDone) {
			e.Fatalf(req.Key, "Claim in a finished transaction (commit=%v): %v, want ErrBadTx and ErrTxDone", commit, err)
		}
	}
	// A Complete whose transaction ended is refused too, and stores nothing.
	txn := e.Begin()
	claim, err := e.Store.Claim(e.Ctx, txn.Native(), req)
	if err != nil || claim.Outcome != idem.Won {
		e.Fatalf(req.Key, "Claim: %+v, %v", claim, err)
	}
	if err := txn.Rollback(e.Ctx); err != nil {
		e.Fatalf(req.Key, "Rollback: %v", err)
	}
	if err := claim.Complete(e.Ctx, created("x")); !errors.Is(err, idem.ErrBadTx) {
		e.Fatalf(req.Key, "Complete after rollback: %v, want ErrBadTx", err)
	}
	if n := e.Records(); n != 0 {
		e.Fatalf(req.Key, "records = %d, want 0", n)
	}
}
