package conformance

import (
	"testing"

	"github.com/anishathalye/porcupine"

	"github.com/idemkit/idem"
)

// The History case's model, on hand-made histories: what it accepts is
// sound (no false alarm on what idem may legitimately answer), what it
// refuses is what must never happen.
func TestHistoryModel(t *testing.T) {
	const k = "k"
	// op builds one operation of client c over [call, ret].
	op := func(c int, call, ret int64, in histInput, out histOutput) porcupine.Operation {
		in.Key = k
		return porcupine.Operation{ClientId: c, Input: in, Call: call, Output: out, Return: ret}
	}
	do := func(body int, resp string) histInput { return histInput{Kind: histDo, Body: body, Resp: resp} }
	lease := func(body int) histInput { return histInput{Kind: histLease, Body: body} }
	complete := func(body int, resp string, token int64) histInput {
		return histInput{Kind: histComplete, Body: body, Resp: resp, Token: token}
	}
	read := histInput{Kind: histRead}
	won := func(resp string) histOutput { return histOutput{Result: resWon, Resp: resp} }
	wonToken := func(token int64) histOutput { return histOutput{Result: resWon, Token: token} }
	replay := func(resp string) histOutput { return histOutput{Result: resReplay, Resp: resp} }
	is := func(r histResult) histOutput { return histOutput{Result: r} }
	blind := histOutput{Result: resInFlight, Blind: true}
	found := func(s histState) histOutput { return histOutput{Result: resRead, Rec: s} }
	done := func(body int, resp string) histState { return histState{Phase: phaseDone, Body: body, Resp: resp} }
	pending := func(body int, token int64) histState { return histState{Phase: phasePending, Body: body, Token: token} }

	for _, tc := range []struct {
		name  string
		ops   []porcupine.Operation
		legal bool
	}{
		{"win then replay", []porcupine.Operation{
			op(0, 0, 10, do(0, "a"), won("a")),
			op(1, 20, 30, do(0, "b"), replay("a")),
			op(2, 40, 50, read, found(done(0, "a"))),
		}, true},
		{"replay of another response", []porcupine.Operation{
			op(0, 0, 10, do(0, "a"), won("a")),
			op(1, 20, 30, do(0, "b"), replay("b")),
		}, false},
		{"win after a completion", []porcupine.Operation{
			op(0, 0, 10, do(0, "a"), won("a")),
			op(1, 20, 30, do(0, "b"), won("b")),
		}, false},
		{"concurrent wins", []porcupine.Operation{
			op(0, 0, 30, do(0, "a"), won("a")),
			op(1, 0, 30, do(0, "b"), won("b")),
		}, false},
		{"replay before the winner returns, overlapping", []porcupine.Operation{
			op(0, 0, 30, do(0, "a"), won("a")),
			op(1, 10, 20, do(0, "b"), replay("a")),
		}, true},
		{"replay of a response stored later", []porcupine.Operation{
			op(1, 0, 10, do(0, "b"), replay("a")),
			op(0, 20, 30, do(0, "a"), won("a")),
		}, false},
		{"two stored responses read back", []porcupine.Operation{
			op(0, 0, 10, do(0, "a"), won("a")),
			op(1, 20, 30, read, found(done(0, "b"))),
		}, false},
		{"mismatch for another body", []porcupine.Operation{
			op(0, 0, 10, do(0, "a"), won("a")),
			op(1, 20, 30, do(1, "b"), is(resMismatch)),
		}, true},
		{"mismatch on a free key", []porcupine.Operation{
			op(1, 0, 10, do(1, "b"), is(resMismatch)),
		}, false},
		{"mismatch for the same body", []porcupine.Operation{
			op(0, 0, 10, do(0, "a"), won("a")),
			op(1, 20, 30, do(0, "b"), is(resMismatch)),
		}, false},
		{"in flight while the winner works", []porcupine.Operation{
			op(1, 0, 10, do(0, "b"), is(resInFlight)),
			op(0, 0, 30, do(0, "a"), won("a")),
		}, true},
		{"in flight after a completion", []porcupine.Operation{
			op(0, 0, 10, do(0, "a"), won("a")),
			op(1, 20, 30, do(0, "b"), is(resInFlight)),
		}, false},
		{"blind in flight after a completion", []porcupine.Operation{
			op(0, 0, 10, do(0, "a"), won("a")),
			op(1, 20, 30, do(0, "b"), blind),
			op(2, 40, 50, read, found(done(0, "a"))),
		}, true},
		{"blind in flight on a lease of the other body", []porcupine.Operation{
			op(0, 0, 10, lease(1), wonToken(1)),
			op(1, 20, 30, lease(0), blind),
			op(2, 40, 50, read, found(pending(1, 1))),
		}, true},
		{"blind in flight changes nothing", []porcupine.Operation{
			op(0, 0, 10, do(0, "a"), won("a")),
			op(1, 20, 30, do(0, "b"), blind),
			op(2, 40, 50, read, found(done(0, "b"))),
		}, false},
		{"in flight on a lease of the other body", []porcupine.Operation{
			op(0, 0, 10, lease(1), wonToken(1)),
			op(1, 20, 30, lease(0), is(resInFlight)),
		}, false},
		{"failed changes nothing", []porcupine.Operation{
			op(0, 0, 10, do(0, "a"), is(resFailed)),
			op(1, 20, 30, do(0, "b"), won("b")),
			op(2, 40, 50, read, found(done(0, "b"))),
		}, true},
		{"failed yet its response replays", []porcupine.Operation{
			op(0, 0, 10, do(0, "a"), is(resFailed)),
			op(1, 20, 30, do(0, "b"), replay("a")),
		}, false},
		{"unknown that took effect", []porcupine.Operation{
			op(0, 0, 100, do(0, "a"), is(resUnknown)),
			op(1, 20, 30, do(0, "b"), replay("a")),
			op(2, 110, 120, read, found(done(0, "a"))),
		}, true},
		{"unknown that did not", []porcupine.Operation{
			op(0, 0, 100, do(0, "a"), is(resUnknown)),
			op(1, 20, 30, do(0, "b"), won("b")),
			op(2, 110, 120, read, found(done(0, "b"))),
		}, true},
		{"unknown after a completion cannot store", []porcupine.Operation{
			op(1, 0, 10, do(0, "b"), won("b")),
			op(0, 20, 100, do(0, "a"), is(resUnknown)),
			op(2, 110, 120, read, found(done(0, "a"))),
		}, false},
		{"lease, complete, replay", []porcupine.Operation{
			op(0, 0, 10, lease(0), wonToken(1)),
			op(1, 20, 30, do(0, "b"), is(resInFlight)),
			op(0, 40, 50, complete(0, "a", 1), won("")),
			op(1, 60, 70, lease(0), replay("a")),
			op(2, 80, 90, read, found(done(0, "a"))),
		}, true},
		{"Do wins a leased key", []porcupine.Operation{
			op(0, 0, 10, lease(0), wonToken(1)),
			op(1, 20, 30, do(0, "b"), won("b")),
		}, false},
		{"takeover, then the stale holder is refused", []porcupine.Operation{
			op(0, 0, 10, lease(0), wonToken(1)),
			op(1, 20, 30, lease(0), wonToken(2)),
			op(0, 40, 50, complete(0, "a", 1), is(resLost)),
			op(1, 60, 70, complete(0, "b", 2), won("")),
			op(2, 80, 90, read, found(done(0, "b"))),
		}, true},
		{"stale holder completes after a takeover", []porcupine.Operation{
			op(0, 0, 10, lease(0), wonToken(1)),
			op(1, 20, 30, lease(0), wonToken(2)),
			op(0, 40, 50, complete(0, "a", 1), won("")),
		}, false},
		{"two completions", []porcupine.Operation{
			op(0, 0, 10, lease(0), wonToken(1)),
			op(0, 20, 30, complete(0, "a", 1), won("")),
			op(1, 40, 50, lease(0), wonToken(2)),
		}, false},
		{"takeover with a smaller token", []porcupine.Operation{
			op(0, 0, 10, lease(0), wonToken(2)),
			op(1, 20, 30, lease(0), wonToken(1)),
		}, false},
		{"lease lost although held", []porcupine.Operation{
			op(0, 0, 10, lease(0), wonToken(1)),
			op(0, 20, 30, complete(0, "a", 1), is(resLost)),
			op(2, 40, 50, read, found(pending(0, 1))),
		}, false},
		{"unknown takeover makes the old holder's completion lost", []porcupine.Operation{
			op(0, 0, 10, lease(0), wonToken(1)),
			op(1, 20, 200, lease(0), is(resUnknown)),
			op(0, 40, 50, complete(0, "a", 1), is(resLost)),
			op(2, 210, 220, read, found(pending(0, 2))),
		}, true},
		{"unknown completion that took effect", []porcupine.Operation{
			op(0, 0, 10, lease(0), wonToken(1)),
			op(0, 20, 200, complete(0, "a", 1), is(resUnknown)),
			op(1, 40, 50, do(0, "b"), replay("a")),
			op(2, 210, 220, read, found(done(0, "a"))),
		}, true},
		{"pending read back with another token", []porcupine.Operation{
			op(0, 0, 10, lease(0), wonToken(1)),
			op(2, 20, 30, read, found(pending(0, 3))),
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := porcupine.CheckOperations(historyModel(), tc.ops); got != tc.legal {
				t.Errorf("linearizable = %v, want %v", got, tc.legal)
			}
		})
	}
}

// TestHistoryModelPartitions: keys are checked apart, and each key's
// violations still count.
func TestHistoryModelPartitions(t *testing.T) {
	ops := []porcupine.Operation{
		{ClientId: 0, Input: histInput{Kind: histDo, Key: "a", Resp: "x"}, Call: 0, Output: histOutput{Result: resWon, Resp: "x"}, Return: 10},
		{ClientId: 1, Input: histInput{Kind: histDo, Key: "b", Resp: "y"}, Call: 20, Output: histOutput{Result: resWon, Resp: "y"}, Return: 30},
	}
	if !porcupine.CheckOperations(historyModel(), ops) {
		t.Fatal("wins on two keys: not linearizable")
	}
	ops[1].Output = histOutput{Result: resReplay, Resp: "x"}
	if porcupine.CheckOperations(historyModel(), ops) {
		t.Fatal("a replay on key b of key a's response: linearizable")
	}
}

// TestHistoryOutcome: an InFlight is blind exactly when reads may fail (a
// restart), it holds no record and is not Busy, as the store answers when
// the read after a wait that ran out failed.
func TestHistoryOutcome(t *testing.T) {
	for _, tc := range []struct {
		name         string
		res          idem.Result
		readsMayFail bool
		want         histOutput
	}{
		{"in flight, no record, restarts", idem.Result{Outcome: idem.InFlight}, true, histOutput{Result: resInFlight, Blind: true}},
		{"in flight, no record, no restarts", idem.Result{Outcome: idem.InFlight}, false, histOutput{Result: resInFlight}},
		{"in flight, busy", idem.Result{Outcome: idem.InFlight, Busy: true}, true, histOutput{Result: resInFlight}},
		{"in flight, pending record", idem.Result{Outcome: idem.InFlight, Record: idem.Record{Key: "k"}}, true, histOutput{Result: resInFlight}},
		{"replay", idem.Result{Outcome: idem.Replay, Record: idem.Record{Key: "k", Completed: true}}, true, histOutput{Result: resReplay}},
		{"won", idem.Result{Outcome: idem.Won}, true, histOutput{Result: resWon}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := historyOutcome(tc.res, tc.readsMayFail); got != tc.want {
				t.Errorf("historyOutcome(%+v) = %+v, want %+v", tc.res, got, tc.want)
			}
		})
	}
}
