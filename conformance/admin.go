package conformance

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/idemkit/idem"
)

// The operator's view (Store.Inspect, List, Delete, ForceDelete, Counts)
// on a real table: what each reports for completed, pending and expired
// records, and that the guard on deleting in-flight records holds.

// commitPending claims req in a transaction of its own and commits without
// completing: a pending record no transaction holds (a stuck key).
func (e *env[TTx]) commitPending(req idem.Request) {
	e.T.Helper()
	txn := e.Begin()
	c, err := e.Store.Claim(e.Ctx, txn.Native(), req)
	if err != nil || c.Outcome != idem.Won {
		txn.Rollback(e.Ctx)
		e.Fatalf(req.Key, "Claim: %+v, %v", c, err)
	}
	if err := txn.Commit(e.Ctx); err != nil {
		e.Fatalf(req.Key, "Commit of a pending claim: %v", err)
	}
}

// scoped is request in another scope.
func scoped(scope, key string) idem.Request {
	r := request(key, "x")
	r.Scope = scope
	return r
}

// testAdminInspect: Inspect reports state, status, sizes, times and age of
// completed, pending and expired records, and ErrNotFound for none.
func testAdminInspect[TTx any](t *testing.T, b Backend[TTx]) {
	clk := newClock(t0)
	e := setup(t, b, idem.Config{Retention: retention, Clock: clk.Now})
	done := request("inspect-done", "x")
	resp := created(`{"id":1}`)
	e.do(e.Store, done, e.work("inspect-done", resp))
	pending := request("inspect-pending", "x")
	e.commitPending(pending)
	clk.add(90 * time.Second)

	info, err := e.Store.Inspect(e.Ctx, done.Scope, done.Key)
	switch {
	case err != nil:
		e.Fatalf(done.Key, "Inspect: %v", err)
	case info.State != idem.StateCompleted || info.Status != resp.Status || info.Expired:
		e.Fatalf(done.Key, "Inspect: state %v status %d expired %v, want completed %d live", info.State, info.Status, info.Expired, resp.Status)
	case info.BodyBytes != int64(len(resp.Body)) || info.HeaderBytes == 0:
		e.Fatalf(done.Key, "Inspect: body %d bytes, header %d, want %d and more than 0", info.BodyBytes, info.HeaderBytes, len(resp.Body))
	case info.Fingerprint != done.Fingerprint || info.Scope != done.Scope || info.Key != done.Key:
		e.Fatalf(done.Key, "Inspect: %+v, not the record of the request", info)
	case !info.CreatedAt.Equal(t0) || !info.ExpiresAt.Equal(t0.Add(lifetime)) || info.Age != 90*time.Second:
		e.Fatalf(done.Key, "Inspect: created %v expires %v age %v, want %v, %v, 1m30s", info.CreatedAt, info.ExpiresAt, info.Age, t0, t0.Add(lifetime))
	}

	info, err = e.Store.Inspect(e.Ctx, pending.Scope, pending.Key)
	if err != nil || info.State != idem.StatePending || info.Status != 0 || info.BodyBytes != 0 || info.HeaderBytes != 0 || info.Expired {
		e.Fatalf(pending.Key, "Inspect of a pending record: %+v, %v, want pending, no status, no sizes, live", info, err)
	}

	clk.add(lifetime)
	info, err = e.Store.Inspect(e.Ctx, done.Scope, done.Key)
	if err != nil || !info.Expired || info.State != idem.StateCompleted {
		e.Fatalf(done.Key, "Inspect after the retention: %+v, %v, want the completed record, expired", info, err)
	}
	if _, err := e.Store.Lookup(e.Ctx, done.Scope, done.Key); !errors.Is(err, idem.ErrNotFound) {
		e.Fatalf(done.Key, "Lookup after the retention: %v, want ErrNotFound (Inspect sees what Lookup does not)", err)
	}
	if _, err := e.Store.Inspect(e.Ctx, done.Scope, "inspect-none"); !errors.Is(err, idem.ErrNotFound) {
		e.Fatalf("inspect-none", "Inspect of an unknown key: %v, want ErrNotFound", err)
	}
	if _, err := e.Store.Inspect(e.Ctx, done.Scope, ""); !errors.Is(err, idem.ErrInvalidKey) {
		e.Fatalf("", "Inspect of an empty key: %v, want ErrInvalidKey", err)
	}
}

// testAdminList: filters by scope prefix (bytes, UTF-8 included), state,
// age and expiry select exactly the records they name, in (scope, key)
// order, and keyset pages cover a listing once each.
func testAdminList[TTx any](t *testing.T, b Backend[TTx]) {
	clk := newClock(t0)
	e := setup(t, b, idem.Config{Retention: retention, Clock: clk.Now})
	// Claimed two days ago: expired by now.
	e.do(e.Store, scoped("tenant-a POST /orders", "old-done"), e.workIn("tenant-a POST /orders", "list", created("x")))
	e.commitPending(scoped("tenant-a POST /orders", "old-pending"))
	clk.add(2 * retention)
	// Claimed an hour ago.
	e.do(e.Store, scoped("tenant-a POST /orders", "k2"), e.workIn("tenant-a POST /orders", "list", created("x")))
	e.do(e.Store, scoped("tenant-a POST /orders", "k1"), e.workIn("tenant-a POST /orders", "list", created("x")))
	e.commitPending(scoped("tenant-a PATCH /orders", "k3"))
	e.do(e.Store, scoped("tenant-ab POST /orders", "k4"), e.workIn("tenant-ab POST /orders", "list", created("x")))
	e.commitPending(scoped("tënant-ü POST /x", "k5"))
	clk.add(time.Hour)
	// Claimed now.
	e.do(e.Store, scoped("tenant-b POST /orders", "k6"), e.workIn("tenant-b POST /orders", "list", created("x")))
	e.commitPending(scoped("tenant-a POST /orders", "k7"))

	keys := func(f idem.ListFilter) []string {
		e.T.Helper()
		p, err := e.Store.List(e.Ctx, f)
		if err != nil {
			e.Fatalf("", "List(%+v): %v", f, err)
		}
		if p.Next != nil {
			e.Fatalf("", "List(%+v): a next page after %d records, want none", f, len(p.Records))
		}
		var out []string
		for _, r := range p.Records {
			out = append(out, r.Key)
		}
		return out
	}
	for _, tc := range []struct {
		name string
		f    idem.ListFilter
		want []string
	}{
		{"all", idem.ListFilter{}, []string{"k3", "k1", "k2", "k7", "old-done", "old-pending", "k4", "k6", "k5"}},
		{"prefix", idem.ListFilter{ScopePrefix: "tenant-a"}, []string{"k3", "k1", "k2", "k7", "old-done", "old-pending", "k4"}},
		{"prefix with a space", idem.ListFilter{ScopePrefix: "tenant-a P"}, []string{"k3", "k1", "k2", "k7", "old-done", "old-pending"}},
		{"prefix, whole scope", idem.ListFilter{ScopePrefix: "tenant-a POST /orders"}, []string{"k1", "k2", "k7", "old-done", "old-pending"}},
		{"UTF-8 prefix", idem.ListFilter{ScopePrefix: "tën"}, []string{"k5"}},
		{"no match", idem.ListFilter{ScopePrefix: "tenant-c"}, nil},
		{"pending", idem.ListFilter{States: []idem.State{idem.StatePending}}, []string{"k3", "k7", "old-pending", "k5"}},
		{"completed", idem.ListFilter{States: []idem.State{idem.StateCompleted}}, []string{"k1", "k2", "old-done", "k4", "k6"}},
		{"both states", idem.ListFilter{States: []idem.State{idem.StatePending, idem.StateCompleted}, ScopePrefix: "tenant-b"}, []string{"k6"}},
		{"stuck: pending, live, an hour old", idem.ListFilter{States: []idem.State{idem.StatePending}, MinAge: time.Hour, Expiry: idem.LiveOnly}, []string{"k3", "k5"}},
		{"young", idem.ListFilter{MaxAge: time.Minute}, []string{"k7", "k6"}},
		{"expired", idem.ListFilter{Expiry: idem.ExpiredOnly}, []string{"old-done", "old-pending"}},
		{"live, prefix", idem.ListFilter{Expiry: idem.LiveOnly, ScopePrefix: "tenant-a POST"}, []string{"k1", "k2", "k7"}},
	} {
		// (scope, key) order: "tenant-a PATCH" < "tenant-a POST" <
		// "tenant-ab" < "tenant-b" < "tënant" (ë is two bytes above ASCII).
		got := keys(tc.f)
		if !slices.Equal(got, tc.want) {
			e.Errorf("", "%s: List keys %q, want %q", tc.name, got, tc.want)
		}
	}

	// Paging: pages of 2 cover the listing once, in order.
	var (
		paged []string
		after *idem.Cursor
	)
	for pages := 0; ; pages++ {
		if pages > 10 {
			e.Fatalf("", "paging did not end after 10 pages")
		}
		p, err := e.Store.List(e.Ctx, idem.ListFilter{Limit: 2, After: after})
		if err != nil {
			e.Fatalf("", "List page %d: %v", pages+1, err)
		}
		if len(p.Records) > 2 {
			e.Fatalf("", "List page %d: %d records, want at most 2", pages+1, len(p.Records))
		}
		for _, r := range p.Records {
			paged = append(paged, r.Key)
		}
		if p.Next == nil {
			break
		}
		next, err := idem.ParseCursor(p.Next.Token())
		if err != nil || next != *p.Next {
			e.Fatalf("", "cursor %+v through its token: %+v, %v", *p.Next, next, err)
		}
		after = &next
	}
	if want := keys(idem.ListFilter{}); !slices.Equal(paged, want) {
		e.Fatalf("", "pages of 2: %q, want %q", paged, want)
	}
	if _, err := e.Store.List(e.Ctx, idem.ListFilter{Limit: idem.MaxListLimit + 1}); !errors.Is(err, idem.ErrInvalidConfig) {
		e.Fatalf("", "List with a limit over the maximum: %v, want ErrInvalidConfig", err)
	}
}

// testAdminDelete: Delete removes completed and expired records (the key
// then does its work afresh), refuses a live pending one with
// *InFlightRecordError, ForceDelete removes that too, and a missing key is
// ErrNotFound.
func testAdminDelete[TTx any](t *testing.T, b Backend[TTx]) {
	clk := newClock(t0)
	e := setup(t, b, idem.Config{Retention: retention, Clock: clk.Now})
	done := request("delete-done", "x")
	e.do(e.Store, done, e.work("delete-done", created("first")))
	if err := e.Store.Delete(e.Ctx, done.Scope, done.Key); err != nil {
		e.Fatalf(done.Key, "Delete of a completed record: %v", err)
	}
	if r := e.do(e.Store, done, e.work("delete-done", created("second"))); r.Outcome != idem.Won {
		e.Fatalf(done.Key, "Do after Delete: %v, want won (the work is done again)", r.Outcome)
	}
	if n := e.effectCount("delete-done"); n != 2 {
		e.Fatalf(done.Key, "effects = %d, want 2", n)
	}

	stuck := request("delete-stuck", "x")
	e.commitPending(stuck)
	err := e.Store.Delete(e.Ctx, stuck.Scope, stuck.Key)
	var inFlight *idem.InFlightRecordError
	if !errors.Is(err, idem.ErrRecordInFlight) || !errors.As(err, &inFlight) || inFlight.Record.Key != stuck.Key || inFlight.Record.State != idem.StatePending {
		e.Fatalf(stuck.Key, "Delete of a live pending record: %v, want *InFlightRecordError naming it", err)
	}
	if _, err := e.Store.Inspect(e.Ctx, stuck.Scope, stuck.Key); err != nil {
		e.Fatalf(stuck.Key, "the refused record is gone: %v", err)
	}
	if err := e.Store.ForceDelete(e.Ctx, stuck.Scope, stuck.Key); err != nil {
		e.Fatalf(stuck.Key, "ForceDelete of a live pending record: %v", err)
	}
	if _, err := e.Store.Inspect(e.Ctx, stuck.Scope, stuck.Key); !errors.Is(err, idem.ErrNotFound) {
		e.Fatalf(stuck.Key, "after ForceDelete, Inspect: %v, want ErrNotFound", err)
	}

	old := request("delete-expired-pending", "x")
	e.commitPending(old)
	clk.add(lifetime)
	if err := e.Store.Delete(e.Ctx, old.Scope, old.Key); err != nil {
		e.Fatalf(old.Key, "Delete of an expired pending record: %v", err)
	}
	if err := e.Store.Delete(e.Ctx, old.Scope, old.Key); !errors.Is(err, idem.ErrNotFound) {
		e.Fatalf(old.Key, "Delete of a deleted record: %v, want ErrNotFound", err)
	}
	if err := e.Store.ForceDelete(e.Ctx, old.Scope, "delete-none"); !errors.Is(err, idem.ErrNotFound) {
		e.Fatalf("delete-none", "ForceDelete of an unknown key: %v, want ErrNotFound", err)
	}
}

// testAdminCounts: Counts splits live records by state and counts the
// expired ones, narrowed by a scope prefix.
func testAdminCounts[TTx any](t *testing.T, b Backend[TTx]) {
	clk := newClock(t0)
	e := setup(t, b, idem.Config{Retention: retention, Clock: clk.Now})
	for i := range 3 {
		e.do(e.Store, scoped("tenant-a POST /x", keyN("old", i)), e.workIn("tenant-a POST /x", "count", created("x")))
	}
	e.commitPending(scoped("tenant-b POST /x", "old-pending"))
	clk.add(lifetime)
	for i := range 4 {
		e.do(e.Store, scoped("tenant-a POST /x", keyN("done", i)), e.workIn("tenant-a POST /x", "count", created("x")))
	}
	e.do(e.Store, scoped("tenant-b POST /x", "done"), e.workIn("tenant-b POST /x", "count", created("x")))
	for i := range 2 {
		e.commitPending(scoped("tenant-a POST /x", keyN("pending", i)))
	}
	for _, tc := range []struct {
		prefix                     string
		pending, completed, expird int64
	}{
		{"", 2, 5, 4},
		{"tenant-a", 2, 4, 3},
		{"tenant-b", 0, 1, 1},
		{"tenant-c", 0, 0, 0},
	} {
		c, err := e.Store.Counts(e.Ctx, tc.prefix)
		if err != nil {
			e.Fatalf("", "Counts(%q): %v", tc.prefix, err)
		}
		if c.Live[idem.StatePending] != tc.pending || c.Live[idem.StateCompleted] != tc.completed || c.Expired != tc.expird ||
			c.Total() != tc.pending+tc.completed+tc.expird {
			e.Errorf("", "Counts(%q) = %+v, want %d pending, %d completed, %d expired", tc.prefix, c, tc.pending, tc.completed, tc.expird)
		}
	}
}
