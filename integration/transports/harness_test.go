package transports

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemkit/idem"
)

// harness is the handler's side of a transport under test: every
// transport's handler reads the request its own way, then calls act, which
// records what it saw, writes the effect in idem's transaction and plays
// the step's fault. Steps are found by the id the request carries.
type harness struct {
	b  *backend
	ns string // the sequence's namespace: principals are ns/user

	mu    sync.Mutex
	steps map[string]*step
	// runs numbers the handler's runs, so every answer's body is unique
	// in the sequence (and the same when rapid runs it again).
	runs atomic.Int64
}

func newHarness(b *backend, ns string) *harness {
	return &harness{b: b, ns: ns, steps: map[string]*step{}}
}

// principal is the principal the auth layer gives user.
func (h *harness) principal(user string) string { return h.ns + "/" + user }

// step is one request in flight: what was drawn, whether it goes through
// the stack without idem (a probe), the client's hang-up, and the runs of
// the handler it caused.
type step struct {
	id     string
	req    request
	probe  bool
	hangup context.CancelFunc // set by the transport before it sends

	mu   sync.Mutex
	runs []run
}

// run is one run of the handler.
type run struct {
	N      int
	View   string // what the handler saw: principal, route, path value, query, body
	Result string // resultAnswered, resultFailed, resultPanicked, resultRetry, resultBroken, resultProbe
	Body   string // the body it wrote (styleWrite)
	Note   string
}

const (
	resultAnswered = "answered"
	resultFailed   = "failed"
	resultPanicked = "panicked"
	resultRetry    = "met a retryable error"
	resultBroken   = "could not do its work"
	resultProbe    = "probe"
)

func (s *step) record(r run) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.runs = append(s.runs, r)
}

func (s *step) ran() []run {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]run(nil), s.runs...)
}

func (h *harness) newStep(id string, req request, probe bool) *step {
	s := &step{id: id, req: req, probe: probe, hangup: func() {}}
	h.mu.Lock()
	h.steps[id] = s
	h.mu.Unlock()
	return s
}

func (h *harness) step(id string) *step {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.steps[id]
}

// decision is what a run answers once it did its work: a status and a
// body, or a failure to report the transport's way.
type decision struct {
	answer answer
	body   []byte
	err    error
	run    string // the run's number, which the handler sends in the X-Run header
}

// headerRun is the response header in which the handler names its run:
// a client must never get the one of a run that was rolled back.
const headerRun = "X-Run"

// panicked is the value the handler panics with.
type panicked struct{ step string }

// errHandler is the error of a handler that fails.
var errHandler = errors.New("the handler failed")

// act is the handler's work for one run of step id, in tx (nil outside
// idem, for a probe), having seen view.
func (h *harness) act(ctx context.Context, tx *sql.Tx, id, view string) decision {
	s := h.step(id)
	if s == nil {
		return decision{err: fmt.Errorf("no step %q", id)}
	}
	n := int(h.runs.Add(1))
	r := run{N: n, View: view}
	body, _ := json.Marshal(map[string]any{"run": n, "saw": view})
	if s.probe {
		r.Result = resultProbe
		s.record(r)
		return decision{answer: answerOK, body: body, run: strconv.Itoa(n)}
	}
	first := len(s.ran()) == 0
	broken := func(err error) decision {
		r.Result, r.Note = resultBroken, err.Error()
		s.record(r)
		return decision{err: err, run: strconv.Itoa(n)}
	}
	if tx == nil {
		return broken(errors.New("no transaction in the handler's context"))
	}
	k := s.req.sk()
	if err := h.b.writeEffect(ctx, tx, h.principal(k.User), k, n); err != nil {
		return broken(fmt.Errorf("write the effect: %w", err))
	}
	switch s.req.Fault {
	case faultFail:
		r.Result = resultFailed
		s.record(r)
		return decision{err: errHandler, run: strconv.Itoa(n)}
	case faultPanic:
		r.Result = resultPanicked
		s.record(r)
		panic(panicked{id})
	case faultRetry:
		if first {
			r.Result = resultRetry
			s.record(r)
			return decision{err: fmt.Errorf("the database asks for a retry: %w", idem.ErrSerialization), run: strconv.Itoa(n)}
		}
	case faultFailed:
		if err := h.b.failStatement(ctx, tx); err != nil {
			return broken(err)
		}
	case faultSlow:
		time.Sleep(5 * time.Millisecond)
	case faultHangup:
		s.hangup()
		select {
		case <-ctx.Done():
		case <-time.After(2 * time.Second):
		}
	}
	r.Result, r.Body = resultAnswered, string(body)
	s.record(r)
	return decision{answer: s.req.Answer, body: body, run: strconv.Itoa(n)}
}

// view is what a handler saw, in one line: who (the principal without
// the sequence's namespace, so that a sequence reads the same when rapid
// runs it again), where, and what it read.
func (h *harness) view(principal, route, id string, query url.Values, body string) string {
	who, ok := strings.CutPrefix(principal, h.ns+"/")
	if !ok {
		who = "(principal " + principal + ")"
	}
	return fmt.Sprintf("%s POST %s id=%q query=%q body=%s", who, route, id, query.Encode(), body)
}

// formView is a parsed form as the handler sees it.
func formView(v url.Values) string { return "form:" + v.Encode() }

// jsonView is a JSON body as the handler sees it: its content, not its
// bytes (fields in another order are the same to the handler).
func jsonView(b []byte) string {
	if len(b) == 0 {
		return "json:(empty)"
	}
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return "json?:" + string(b)
	}
	c, _ := json.Marshal(v) // map keys sorted
	return "json:" + string(c)
}

// rawView is a body the handler read as bytes.
func rawView(b []byte) string {
	if len(b) == 0 {
		return "raw:(empty)"
	}
	return "raw:" + string(b)
}

// shorten cuts a long string for a log line.
func shorten(s string) string {
	if len(s) > 160 {
		return s[:120] + "..." + fmt.Sprintf("(%d bytes)", len(s))
	}
	return strings.ReplaceAll(s, "\n", `\n`)
}
