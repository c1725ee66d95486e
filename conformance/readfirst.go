package conformance

import (
	"fmt"
	"testing"

	"github.com/idemkit/idem"
)

// testReadFirstSettledKeys: with Config.ReadFirst, a completed key replays
// byte for byte and another body is a mismatch, without running the work,
// and a key past its retention is claimed afresh.
func testReadFirstSettledKeys[TTx any](t *testing.T, b Backend[TTx]) {
	clk := newClock(t0)
	e := setup(t, b, idem.Config{ReadFirst: idem.ReadFirstAlways, Retention: retention, Clock: clk.Now})
	req := request("rf-1", "body")
	first := e.do(e.Store, req, e.work("rf-1", created("first")))
	if first.Outcome != idem.Won || !first.Committed {
		e.Fatalf(req.Key, "first Do: %+v, want won and committed", first)
	}
	for _, c := range []struct {
		req  idem.Request
		want idem.Outcome
	}{{req, idem.Replay}, {request("rf-1", "other body"), idem.Mismatch}, {req, idem.Replay}} {
		res := e.do(e.Store, c.req, e.work("rf-1", created("again")))
		if res.Outcome != c.want || res.Committed {
			e.Fatalf(req.Key, "Do: %v committed %v, want %v", res.Outcome, res.Committed, c.want)
		}
		if c.want == idem.Replay && !sameResponse(res.Response, created("first")) {
			e.Fatalf(req.Key, "replayed %d %q, want the first response", res.Response.Status, res.Response.Body)
		}
	}
	if n := e.effectCount("rf-1"); n != 1 {
		e.Fatalf(req.Key, "effects = %d, want 1", n)
	}

	clk.add(lifetime)
	res := e.do(e.Store, request("rf-1", "other body"), e.work("rf-1", created("second")))
	if res.Outcome != idem.Won || !res.Committed {
		e.Fatalf(req.Key, "Do after retention: %v, want won (takeover)", res.Outcome)
	}
	if n := e.effectCount("rf-1"); n != 2 {
		e.Fatalf(req.Key, "effects = %d, want 2", n)
	}
}

// testReadFirstOpenKeys: with Config.ReadFirst, a key whose claim has not
// committed is still decided by the claim: the read sees nothing, the claim
// waits for the holder and replays its response. Racing clients on a new key
// make one effect.
func testReadFirstOpenKeys[TTx any](t *testing.T, b Backend[TTx]) {
	e := setupObserved(t, b, idem.Config{ReadFirst: idem.ReadFirstAlways, MaxAttempts: 40})
	loserWaitsThenReplays(e, "rf-held")

	const n = 16
	race := request("rf-race", "x")
	e.contend(n, n/2, race, func(i int) idem.Func[TTx] { return e.work("rf-race", created(fmt.Sprintf("winner-%d", i))) })
	if c := e.effectCount("rf-race"); c != 1 {
		e.Fatalf(race.Key, "effects = %d, want exactly 1", c)
	}
}
