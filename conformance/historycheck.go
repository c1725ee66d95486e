package conformance

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/anishathalye/porcupine"

	"github.com/idemkit/idem"
)

// The History case's checks, once every operation ended: the final reads
// of every key, the database's invariants, and what a failure reports
// (the keys that are not linearizable, a tally, porcupine's
// visualisation).

// finish ends the operations whose outcome is unknown at the history's
// end and reads every key's record, as the history's last operations.
func (h *historyRun[TTx]) finish() {
	end := h.now()
	for _, i := range h.unknown {
		h.ops[i].Return = end
	}
	keys := make([]string, 0, len(h.keys))
	for k := range h.keys {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		call := h.now()
		var rec historyRecord
		err := h.again(func() (err error) { rec, err = h.readKey(k); return err })
		if err != nil {
			h.unexpectedf("Lookup of key %q after the history: %v", k, err)
			continue
		}
		h.ops = append(h.ops, porcupine.Operation{ClientId: historyWorkers, Input: histInput{Kind: histRead, Key: k}, Call: call,
			Output: histOutput{Result: resRead, Rec: rec.state}, Return: h.now()})
	}
}

// historyRecord is a key's record as the history sees it.
type historyRecord struct {
	state histState
	step  string
}

func (h *historyRun[TTx]) readKey(key string) (historyRecord, error) {
	rec, err := h.Store.Lookup(h.Ctx, request(key, "").Scope, key)
	if errors.Is(err, idem.ErrNotFound) {
		return historyRecord{}, nil
	}
	if err != nil {
		return historyRecord{}, err
	}
	body := -1
	for b := range 2 {
		if request(key, fmt.Sprintf("b%d", b)).Fingerprint == rec.Fingerprint {
			body = b
		}
	}
	if body < 0 {
		return historyRecord{}, fmt.Errorf("the record's fingerprint is neither body's")
	}
	r := historyRecord{state: histState{Phase: phasePending, Body: body, Token: rec.Token}, step: rec.Step}
	if rec.Completed {
		r.state = histState{Phase: phaseDone, Body: body, Resp: historyResp(rec.Response)}
	}
	return r, nil
}

// invariants checks the database after the history: per key and body, one
// effect written with the completion when the record is completed for that
// body and none otherwise, one step effect when the record holds the step
// and none otherwise; every replay answered the stored response; at most
// one completion was acknowledged, and the stored response is its own.
func (h *historyRun[TTx]) invariants() []string {
	var effects map[string]int64
	if err := h.again(func() (err error) { effects, err = h.effectCounts(); return err }); err != nil {
		h.T.Fatalf("[%s] count effects: %v", h.Backend, err)
	}
	var bad []string
	answered := map[string][]porcupine.Operation{}
	for _, op := range h.ops {
		in, out := op.Input.(histInput), op.Output.(histOutput)
		if in.Kind != histRead && (out.Result == resReplay || out.Result == resWon && in.Kind != histLease) {
			answered[in.Key] = append(answered[in.Key], op)
		}
	}
	for _, op := range h.ops {
		in := op.Input.(histInput)
		if in.Kind != histRead {
			continue
		}
		var rec historyRecord
		err := h.again(func() (err error) { rec, err = h.readKey(in.Key); return err })
		if err != nil {
			bad = append(bad, fmt.Sprintf("key %q: %v", in.Key, err))
			continue
		}
		for b := range 2 {
			completion := effects[effectLabel(in.Key, b, "do")] + effects[effectLabel(in.Key, b, "final")]
			want := int64(boolInt(rec.state.Phase == phaseDone && rec.state.Body == b))
			if completion != want {
				bad = append(bad, fmt.Sprintf("key %q body b%d: %d completion effects, want %d (record: %v)", in.Key, b, completion, want, rec.state))
			}
			step := effects[effectLabel(in.Key, b, "step")]
			want = int64(boolInt(rec.state.Phase != phaseNone && rec.state.Body == b && rec.step == historyStep))
			if step != want {
				bad = append(bad, fmt.Sprintf("key %q body b%d: %d step effects, want %d (record: %v, step %q)", in.Key, b, step, want, rec.state, rec.step))
			}
		}
		wins := 0
		for _, op := range answered[in.Key] {
			oi, oo := op.Input.(histInput), op.Output.(histOutput)
			stored := oi.Resp
			if oo.Result == resReplay {
				stored = oo.Resp
			} else {
				wins++
			}
			if rec.state.Phase != phaseDone || stored != rec.state.Resp {
				bad = append(bad, fmt.Sprintf("key %q: %s answered %q, the record holds %v", in.Key, describeHistOp(oi, oo), stored, rec.state))
			}
		}
		if wins > 1 {
			bad = append(bad, fmt.Sprintf("key %q: %d completions acknowledged, want at most 1", in.Key, wins))
		}
	}
	return bad
}

// again runs read, a read after the history, as readAgain does after an
// error while the server was restarted during the history, once
// otherwise.
func (h *historyRun[TTx]) again(read func() error) error {
	if h.restarts == nil {
		return read()
	}
	return h.readAgain(read)
}

// illegalKeys names the keys whose own operations are not linearizable.
func (h *historyRun[TTx]) illegalKeys(model porcupine.Model) []string {
	var bad []string
	for _, part := range model.Partition(h.ops) {
		if porcupine.CheckOperationsTimeout(model, part, historyCheckTimeout) == porcupine.Illegal {
			bad = append(bad, fmt.Sprintf("%q (%d operations)", part[0].Input.(histInput).Key, len(part)))
		}
	}
	return bad
}

// tally counts the history's results.
func (h *historyRun[TTx]) tally() string {
	counts := map[string]int{}
	for _, op := range h.ops {
		in, out := op.Input.(histInput), op.Output.(histOutput)
		if in.Kind != histRead {
			counts[in.Kind.String()+" "+out.Result.String()]++
		}
	}
	names := make([]string, 0, len(counts))
	for k := range counts {
		names = append(names, k)
	}
	slices.Sort(names)
	var b strings.Builder
	for i, k := range names {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %d", k, counts[k])
	}
	return b.String()
}

// visualize writes porcupine's HTML visualisation of the history to a
// file that outlives the test, and returns its path (or why there is none).
func (h *historyRun[TTx]) visualize(model porcupine.Model, info porcupine.LinearizationInfo) string {
	dir, err := os.MkdirTemp("", "idem-history-")
	if err != nil {
		return fmt.Sprintf("none (%v)", err)
	}
	name := strings.NewReplacer("/", "-", " ", "-").Replace(h.Backend)
	path := filepath.Join(dir, fmt.Sprintf("%s-seed%d.html", name, h.seed))
	if err := porcupine.VisualizePath(model, info, path); err != nil {
		return fmt.Sprintf("none (%v)", err)
	}
	return path
}
