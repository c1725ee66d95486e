package transports

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/integration/containers"
)

// TestMain stops the containers the tests of this package started.
func TestMain(m *testing.M) { containers.Main(m) }

var (
	onlyStack = flag.String("transports.stack", "", "a fixed stack for every sequence instead of a drawn one: comma-separated layer names, or \"none\"; with a leading ~, the layers never drawn")
	onlyFault = flag.String("transports.faults", "", "the faults drawn: comma-separated (none, fail, panic, retry, failed, slow, hangup)")
	validKeys = flag.Bool("transports.validkeys", false, "draw only valid idempotency keys (no queue message ids that are not keys)")
	onlyStyle = flag.String("transports.styles", "", "the answer styles drawn: write, error")
)

// TimeEnv bounds each transport's run: it starts no new sequence once the
// time is spent (a failing one is still shrunk in full).
const TimeEnv = "IDEM_TRANSPORTS_TIME"

const (
	defaultTime = 8 * time.Second
	stepTimeout = 10 * time.Second // a step that takes longer hangs: the sequence fails
)

// transport is one way to reach idem: how its stacks are drawn and built.
type transport struct {
	name string
	// layers are the middleware a stack draws from, outermost first.
	layers []string
	// features says what a sequence on this stack draws.
	features func(stack []string) features
	// start builds the stack around idem (protect) or without it.
	start func(t *rapid.T, h *harness, stack []string, protect bool) server
	// vocab is how the transport's client sees answers.
	vocab vocabulary
}

// server is a built stack: it sends a step's request, and says what
// identifies a request on its wire and what scope a key has.
type server interface {
	send(ctx context.Context, s *step) outcome
	// wire is the request as sent: two requests with the same wire are the
	// same request (an identical retry).
	wire(r request) string
	// scope is the idem scope of user's keys on route.
	scope(principal, route string) string
}

// vocabulary is how a transport's client sees the answers.
type vocabulary struct {
	status func(answer) string // the status of a handler's answer
	failed string              // the status when the handler failed
	// aborted is the status when the handler answered success after a
	// failed statement aborted its transaction (PostgreSQL): its work was
	// rolled back, so the success must not reach the client.
	aborted  string
	panicked []string // the statuses when it panicked (or the call aborted)
	mismatch string   // idem's code for a key used with another request
	tooLarge string   // the status of a body over the limit
	// bodyless reports whether the client sees the handler's answer without
	// its body (an RPC error status); nil: never.
	bodyless func(answer) bool
}

// outcome is what the client got.
type outcome struct {
	Status   string
	Body     string
	Replayed bool
	Code     string // idem's code (an HTTP problem's, an RPC error's reason); "" for the handler's answers
	Aborted  bool   // no answer: the connection dropped, or the client hung up
	Err      string
	Runs     []string // the X-Run header: the runs whose headers reached the client
}

func (o outcome) String() string {
	if o.Aborted {
		return "no answer (" + o.Err + ")"
	}
	s := o.Status
	if o.Code != "" {
		s += " " + o.Code
	}
	if o.Replayed {
		s += " replayed"
	}
	if o.Body != "" {
		s += " " + shorten(o.Body)
	}
	return s
}

// storedAnswer is the model's record of a key's stored answer: the step
// that got it, what the handler saw then, the wire, and what the client got.
type storedAnswer struct {
	step    int
	req     request
	view    string
	wire    string
	out     outcome
	anyBody bool // the body is the framework's rendering: compare the status only
	// unseen: stored (perhaps) after the client hung up, so no client saw
	// how its body renders (anyBody); the first replay shows it, and every
	// later one must show the same.
	unseen  bool
	byLayer bool // a layer between two idem middlewares answered: no effect
}

// sequence is one drawn stack and its steps, with the model.
type sequence struct {
	tr      transport
	h       *harness
	srv     server // the stack with idem
	bare    server // the same stack without idem: what the handler sees
	stack   []string
	feat    features
	consume bool // a layer in front reads the body before idem

	n       int
	sent    []request
	answers map[sk]*storedAnswer
	maybe   map[sk]*storedAnswer // an answer that may or may not be stored (a hang-up, a failed statement)
	touched []sk
}

// consumers are the layers that may read the body before idem and leave
// the handler nothing of it (a body read and dropped; a form parse that
// failed), so idem may refuse the request (body-consumed). gin's body
// binding is not among them: the handler sees the bound body, and idem
// must fingerprint it.
var consumers = []string{"read-body", "parse-form"}

// run runs tr's sequences on b until the time budget is spent.
func runTransport(t *testing.T, tr transport, b *backend) {
	budget := defaultTime
	if v := os.Getenv(TimeEnv); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			t.Fatalf("%s=%q: want a positive duration such as 30s", TimeEnv, v)
		}
		budget = d
	}
	deadline := time.Now().Add(budget)
	sequences, steps := 0, 0
	failing := false
	rapid.Check(t, func(rt *rapid.T) {
		if !failing && time.Now().After(deadline) {
			return
		}
		defer func() {
			if rt.Failed() {
				failing = true
			}
		}()
		sequences++
		q := newSequence(rt, tr, b, fmt.Sprintf("s%d", sequences))
		defer func() { steps += q.n }()
		rt.Repeat(map[string]func(*rapid.T){
			"send":   q.send,
			"resend": q.resend,
			"":       q.check,
		})
	})
	t.Logf("%s on %s: %d sequences, %d steps (budget %s, set by %s)", tr.name, b.name, sequences, steps, budget, TimeEnv)
}

func newSequence(t *rapid.T, tr transport, b *backend, ns string) *sequence {
	stack := drawStack(t, tr.layers)
	h := newHarness(b, ns)
	q := &sequence{tr: tr, h: h, stack: stack, feat: tr.features(stack),
		answers: map[sk]*storedAnswer{}, maybe: map[sk]*storedAnswer{}}
	for _, l := range stack {
		q.consume = q.consume || slices.Contains(consumers, l)
	}
	if f := *onlyFault; f != "" {
		q.feat.faults = slices.DeleteFunc(strings.Split(f, ","), func(s string) bool { return !slices.Contains(q.feat.faults, s) })
		if len(q.feat.faults) == 0 {
			t.Fatalf("-transports.faults=%s: none of them is drawn on %s", f, tr.name)
		}
	}
	if *validKeys {
		q.feat.rejectID = false
	}
	if f := *onlyStyle; f != "" {
		q.feat.styles = slices.DeleteFunc(strings.Split(f, ","), func(s string) bool { return !slices.Contains(q.feat.styles, s) })
		if len(q.feat.styles) == 0 {
			q.feat.styles = []string{styleWrite}
		}
	}
	if q.consume {
		q.feat.large = false // what a drained body is over the limit is the stack's business
	}
	if l, d := slices.Index(stack, layerLimit), slices.Index(stack, layerDumpBody); l >= 0 && d > l {
		// The dump reads the body through the limit and keeps what it
		// got, dropping the limit's error: the handler gets a cut body.
		q.feat.large = false
	}
	if n, g := slices.Index(stack, layerNested), slices.Index(stack, layerGzip); n >= 0 && g > n {
		// The outer idem reads the body still encoded: under its limit,
		// it may decode to one over the inner idem's, which passes it on.
		q.feat.large = false
	}
	t.Logf("%s, stack (outermost first): %s", tr.name, stackString(stack))
	q.srv = tr.start(t, h, stack, true)
	q.bare = tr.start(t, h, stack, false)
	return q
}

// drawStack draws the middleware in front of idem, outermost first, or
// takes -transports.stack.
func drawStack(t *rapid.T, layers []string) []string {
	if never, ok := strings.CutPrefix(*onlyStack, "~"); ok {
		layers = slices.DeleteFunc(slices.Clone(layers), func(l string) bool { return slices.Contains(strings.Split(never, ","), l) })
	} else if s := *onlyStack; s != "" {
		if s == "none" {
			return nil
		}
		stack := strings.Split(s, ",")
		for _, l := range stack {
			if !slices.Contains(layers, l) {
				t.Skipf("-transports.stack: this transport has no layer %q (it has %s)", l, strings.Join(layers, ", "))
			}
		}
		return stack
	}
	if len(layers) == 0 {
		return nil
	}
	return rapid.SliceOfNDistinct(rapid.SampledFrom(layers), 0, 3, rapid.ID[string]).Draw(t, "stack")
}

func stackString(stack []string) string {
	if len(stack) == 0 {
		return "(nothing but auth)"
	}
	return "auth, " + strings.Join(stack, ", ")
}

func (q *sequence) send(t *rapid.T) {
	q.do(t, drawRequest(t, q.feat), "")
}

// resend sends an earlier request again, byte for byte, as a client's
// retry does (the handler's answer and fault are drawn anew: they apply
// only if it runs).
func (q *sequence) resend(t *rapid.T) {
	if len(q.sent) == 0 {
		t.Skip("nothing sent yet")
	}
	i := rapid.IntRange(0, len(q.sent)-1).Draw(t, "earlier")
	r := q.sent[i]
	r.Answer = rapid.SampledFrom([]answer{answerCreated, answerOK, answerConflict, answerUnavailable}).Draw(t, "answer")
	r.Fault = rapid.SampledFrom(q.feat.faults).Draw(t, "fault")
	if r.Fault == faultPanic && !slices.Contains(q.feat.faults, faultPanic) {
		r.Fault = faultNone
	}
	q.do(t, r, fmt.Sprintf(" (again: step %d's request)", i+1))
}

func (q *sequence) do(t *rapid.T, r request, again string) {
	q.n++
	q.sent = append(q.sent, r)
	k := r.sk()
	if !slices.Contains(q.touched, k) {
		q.touched = append(q.touched, k)
	}
	ctx, cancel := context.WithTimeout(context.Background(), stepTimeout)
	defer cancel()

	// What the handler sees of this request, without idem.
	probe := q.h.newStep(fmt.Sprintf("%s-%d-probe", q.h.ns, q.n), r, true)
	pout := q.bare.send(ctx, probe)
	want := ""
	if pr := probe.ran(); len(pr) > 0 {
		want = pr[0].View
	}

	s := q.h.newStep(fmt.Sprintf("%s-%d", q.h.ns, q.n), r, false)
	out := q.srv.send(ctx, s)
	// The step's context (probe and call) ends only by its deadline.
	if ctx.Err() != nil && !errors.Is(context.Cause(ctx), context.Canceled) {
		t.Fatalf("step %d hung past %s: %s", q.n, stepTimeout, r)
	}
	runs := s.ran()
	t.Logf("step %d%s: %s", q.n, again, r)
	for _, rn := range runs {
		t.Logf("        run %d %s; it saw %s", rn.N, rn.Result+noteOf(rn), shorten(rn.View))
	}
	if want == "" {
		t.Logf("        (without idem the handler does not run: %s)", pout)
	}
	t.Logf("        client got %s", out)
	q.judge(t, r, want, pout, out, runs)
}

func noteOf(r run) string {
	if r.Note == "" {
		return ""
	}
	return " (" + r.Note + ")"
}

// judge checks what the client got against the model, and updates it.
func (q *sequence) judge(t *rapid.T, r request, want string, pout, out outcome, runs []run) {
	k, v, wire := r.sk(), q.tr.vocab, q.srv.wire(r)
	prev := q.answers[k]
	if len(runs) > 0 {
		if prev != nil {
			t.Fatalf("WRONG: the handler ran again for key %q, already answered at step %d (%s)", r.Key, prev.step, prev.out)
		}
		if r.Large {
			t.Fatalf("WRONG: a body over the limit reached the handler")
		}
		for _, rn := range runs {
			if want != "" && rn.View != want {
				t.Fatalf("WRONG: under idem the handler saw\n\t%s\nwithout idem it sees\n\t%s", rn.View, want)
			}
		}
		last := runs[len(runs)-1]
		switch last.Result {
		case resultAnswered:
			a := &storedAnswer{step: q.n, req: r, view: last.View, wire: wire, anyBody: r.Style != styleWrite || (v.bodyless != nil && v.bodyless(r.Answer)),
				out: outcome{Status: v.status(r.Answer), Body: last.Body}}
			if r.Fault == faultHangup || r.Fault == faultFailed {
				// Whether it was stored is up to the database (a client
				// gone, an aborted transaction): the check that follows
				// reads the record.
				if r.Fault == faultFailed && q.h.b.aborts && r.Answer.httpStatus() < 400 {
					if out.Replayed || out.Status != v.aborted {
						t.Fatalf("WRONG: the handler answered %s after a failed statement aborted its transaction; the client got %s, want %s", a.out.Status, out, v.aborted)
					}
					return // nothing stored: the check that follows reads the record
				}
				if r.Fault == faultFailed && (out.Replayed || out.Status != a.out.Status) {
					t.Fatalf("WRONG: the handler answered %s after a failed statement; the client got %s", a.out.Status, out)
				}
				if r.Answer.stored() {
					if r.Fault == faultFailed {
						a.out = out
					}
					a.unseen = r.Fault == faultHangup && a.anyBody
					q.maybe[k] = a
				}
				return
			}
			if out.Replayed || out.Status != a.out.Status || (!a.anyBody && out.Body != a.out.Body) {
				t.Fatalf("WRONG: the handler answered %s %s; the client got %s", a.out.Status, shorten(a.out.Body), out)
			}
			if len(out.Runs) > 0 && !slices.Equal(out.Runs, []string{strconv.Itoa(last.N)}) {
				t.Fatalf("WRONG: the client got the %s header of runs %v; only run %d's answer was kept", headerRun, out.Runs, last.N)
			}
			if r.Answer.stored() {
				a.out = out
				q.answers[k] = a
			}
		case resultFailed:
			if out.Replayed || out.Status != v.failed {
				t.Fatalf("WRONG: the handler failed; the client got %s, want %s", out, v.failed)
			}
		case resultPanicked:
			if !out.Aborted && !slices.Contains(v.panicked, out.Status) {
				t.Fatalf("WRONG: the handler panicked; the client got %s, want one of %v or no answer", out, v.panicked)
			}
		case resultRetry:
			t.Fatalf("WRONG: the store did not run the handler again after a retryable error; the client got %s", out)
		default:
			t.Fatalf("the handler %s: %s", last.Result, last.Note)
		}
		return
	}
	// The handler did not run.
	switch {
	case r.Large:
		// A layer in front of idem may refuse the request itself (gzip
		// meeting a body a binding layer drained): without idem the stack
		// answers the same, and idem never saw it.
		if out.Status != v.tooLarge && (want != "" || out.Status != pout.Status) {
			t.Fatalf("WRONG: a body over the limit got %s, want %s", out, v.tooLarge)
		}
	case out.Replayed:
		if prev == nil {
			t.Fatalf("WRONG: a replay, but key %q has no stored answer", r.Key)
		}
		if prev.view != want {
			t.Fatalf("WRONG: replayed the answer of another request: key %q answered step %d, which the handler saw as\n\t%s\nthis request it sees as\n\t%s",
				r.Key, prev.step, prev.view, want)
		}
		if prev.unseen && out.Status == prev.out.Status {
			prev.out.Body, prev.unseen = out.Body, false
		}
		if out.Status != prev.out.Status || out.Body != prev.out.Body {
			t.Fatalf("WRONG: the replay is not the stored answer: got %s, stored %s", out, prev.out)
		}
	case out.Code == v.mismatch && out.Code != "":
		if prev == nil {
			t.Fatalf("WRONG: a mismatch, but key %q has no stored answer", r.Key)
		}
		if prev.wire == wire {
			t.Fatalf("WRONG: an identical retry of step %d was refused as a mismatch", prev.step)
		}
	case q.consume && out.Code == "body-consumed":
		// A refusal of a body read before idem: documented once the
		// adapters detect it.
	case want == "" && out.Status == pout.Status && out.Body == pout.Body:
		// A layer in front answered before idem, as it does without it
		// (a gzip decoder given a drained body). Between two idem
		// middlewares (nested) it answered inside the outer one's run,
		// which may store it: the check after the step reads the record.
		if prev == nil {
			q.maybe[k] = &storedAnswer{step: q.n, req: r, wire: wire, out: out, byLayer: true}
		}
	default:
		t.Fatalf("WRONG: the handler did not run, and the client got %s%s", out, q.recordNote(k))
	}
}

// recordNote says what the database holds for k, for a failure's message.
func (q *sequence) recordNote(k sk) string {
	if idem.ValidateKey(k.Key) != nil {
		return ""
	}
	ctx, cancel := context.WithTimeout(context.Background(), stepTimeout)
	defer cancel()
	principal := q.h.principal(k.User)
	effects, _ := q.h.b.effectCount(ctx, principal, k)
	rec, err := q.h.b.store.Inspect(ctx, q.srv.scope(principal, k.Route), k.Key)
	switch {
	case errors.Is(err, idem.ErrNotFound):
		return fmt.Sprintf("\n(the key has no record, and %d effects)", effects)
	case err != nil:
		return ""
	}
	return fmt.Sprintf("\n(the key's record is now %v with status %d, and %d effects)", rec.State, rec.Status, effects)
}

// check compares the database with the model after every step: every key
// with a stored answer has exactly one effect, rolled-back work left none,
// and no key is pending.
func (q *sequence) check(t *rapid.T) {
	ctx, cancel := context.WithTimeout(context.Background(), stepTimeout)
	defer cancel()
	for _, k := range q.touched {
		principal := q.h.principal(k.User)
		effects, err := q.h.b.effectCount(ctx, principal, k)
		if err != nil {
			t.Fatalf("count effects: %v", err)
		}
		if m := q.maybe[k]; m != nil {
			delete(q.maybe, k)
			if effects > 0 || (m.byLayer && q.completed(ctx, principal, k)) {
				q.answers[k] = m
			}
		}
		a := q.answers[k]
		if idem.ValidateKey(k.Key) != nil {
			if want := btoi(a != nil); effects != want {
				t.Fatalf("WRONG: key %q of %s on %s: %d effects, want %d", k.Key, k.User, k.Route, effects, want)
			}
			continue
		}
		rec, err := q.h.b.store.Inspect(ctx, q.srv.scope(principal, k.Route), k.Key)
		switch {
		case errors.Is(err, idem.ErrNotFound):
			if a != nil {
				t.Fatalf("WRONG: key %q of %s on %s has no record, but step %d's answer was stored", k.Key, k.User, k.Route, a.step)
			}
			if effects != 0 {
				t.Fatalf("WRONG: key %q of %s on %s has no record but %d effects: work without an answer committed", k.Key, k.User, k.Route, effects)
			}
		case err != nil:
			t.Fatalf("inspect key %q: %v", k.Key, err)
		case rec.State != idem.StateCompleted:
			t.Fatalf("WRONG: key %q of %s on %s is left %v", k.Key, k.User, k.Route, rec.State)
		default:
			if a != nil && a.byLayer {
				if effects != 0 {
					t.Fatalf("WRONG: key %q of %s on %s holds step %d's answer, which a layer gave, and %d effects", k.Key, k.User, k.Route, a.step, effects)
				}
				continue
			}
			if effects != 1 {
				t.Fatalf("WRONG: key %q of %s on %s has a stored answer (status %d) and %d effects, want exactly 1", k.Key, k.User, k.Route, rec.Status, effects)
			}
			if a == nil {
				t.Fatalf("WRONG: key %q of %s on %s has a stored answer (status %d) that no client was given", k.Key, k.User, k.Route, rec.Status)
			}
		}
	}
}

// completed reports whether k has a completed record.
func (q *sequence) completed(ctx context.Context, principal string, k sk) bool {
	rec, err := q.h.b.store.Inspect(ctx, q.srv.scope(principal, k.Route), k.Key)
	return err == nil && rec.State == idem.StateCompleted
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}
