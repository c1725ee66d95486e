package transports

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"sync"
	"time"

	"pgregory.net/rapid"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemqueue"
)

// queueTransport is idemqueue's Consumer behind an in-memory broker: each
// step delivers one message (its id the key, its queue the route, its data
// the path value, query and fields as JSON in the order drawn) to the
// consumer of the user, and the broker records how it was settled. There
// is no middleware in front of a consumer: the stack is empty.
var queueTransport = transport{
	name: "queue",
	features: func([]string) features {
		return features{
			kinds:    []string{kindJSON, kindEmpty},
			users:    []string{"alice", "bob"},
			styles:   []string{styleWrite},
			routes:   []string{routeOrders, routeRefunds},
			faults:   []string{faultNone, faultNone, faultNone, faultFail, faultPanic, faultRetry, faultFailed, faultSlow, faultHangup},
			rejectID: true,
		}
	},
	vocab: vocabulary{
		status: func(a answer) string {
			if a == answerUnavailable {
				return "retry"
			}
			return "ack"
		},
		failed:   "retry",
		aborted:  "retry",
		panicked: []string{"retry", "reject"},
		mismatch: "mismatch",
		bodyless: func(a answer) bool { return a == answerUnavailable },
	},
	start: startQueue,
}

type queueServer struct {
	h         *harness
	protect   bool
	consumers map[string]*idemqueue.Consumer[*sql.Tx]

	mu         sync.Mutex
	deliveries map[sk]int
}

func startQueue(t *rapid.T, h *harness, _ []string, protect bool) server {
	s := &queueServer{h: h, protect: protect, consumers: map[string]*idemqueue.Consumer[*sql.Tx]{}, deliveries: map[sk]int{}}
	for _, user := range []string{"alice", "bob"} {
		c, err := idemqueue.New(h.b.store, idemqueue.Config{
			Name:   h.principal(user),
			Logger: slog.New(slog.DiscardHandler),
		})
		if err != nil {
			t.Fatal(err)
		}
		s.consumers[user] = c
	}
	return s
}

func (s *queueServer) scope(principal, route string) string { return idemqueue.Scope(principal, route) }

func (s *queueServer) wire(r request) string { return fmt.Sprintf("%s %s", r.Route, queueData(r)) }

// queueData is the message's data: JSON, fields in the order drawn.
func queueData(r request) []byte {
	if r.Kind == kindEmpty && r.ID == "" && r.Query == "" {
		return nil
	}
	var b bytes.Buffer
	b.WriteByte('{')
	fields := r.Fields
	if r.Query != "" {
		fields = append([]field{{"query", r.Query}}, fields...)
	}
	if r.ID != "" {
		fields = append([]field{{"id", r.ID}}, fields...)
	}
	for i, f := range fields {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%q:%q", f.Name, f.Value)
	}
	b.WriteByte('}')
	return b.Bytes()
}

// delivery is a message as the in-memory broker hands it out: it records
// how the consumer settled it.
type delivery struct {
	msg     idemqueue.Message
	settled string
}

func (d *delivery) Message() (idemqueue.Message, error)        { return d.msg, nil }
func (d *delivery) Ack(context.Context) error                  { d.settled = "ack"; return nil }
func (d *delivery) Retry(context.Context, time.Duration) error { d.settled = "retry"; return nil }
func (d *delivery) Reject(context.Context, error) error        { d.settled = "reject"; return nil }

func (s *queueServer) send(ctx context.Context, st *step) outcome {
	ctx, hangup := context.WithCancel(ctx)
	defer hangup()
	st.hangup = hangup
	r := st.req
	s.mu.Lock()
	s.deliveries[r.sk()]++
	n := s.deliveries[r.sk()]
	s.mu.Unlock()
	d := &delivery{msg: idemqueue.Message{Queue: r.Route, ID: r.Key, Data: queueData(r), Delivery: n}}
	principal := s.h.principal(r.User)
	handle := func(ctx context.Context, tx *sql.Tx, m idemqueue.Message) ([]byte, error) {
		fields := map[string]any{}
		_ = json.Unmarshal(m.Data, &fields)
		id, _ := fields["id"].(string)
		q, _ := fields["query"].(string)
		delete(fields, "id")
		delete(fields, "query")
		body, _ := json.Marshal(fields)
		v := s.h.view(principal, m.Queue, id, url.Values{"q": {q}}, "msg:"+string(body))
		dec := s.h.act(ctx, tx, st.id, v)
		switch {
		case dec.err != nil:
			return nil, dec.err
		case dec.answer == answerUnavailable:
			return nil, errors.New("not now")
		}
		return dec.body, nil
	}
	if !s.protect {
		// The probe: the handler alone, as the broker would call it without idem.
		_, _ = guarded(func() ([]byte, error) { return handle(ctx, nil, d.msg) })
		return outcome{Status: "ack"}
	}
	dec, err := s.consumers[r.User].Handle(ctx, d, handle)
	if ctx.Err() != nil {
		return outcome{Aborted: true, Err: "the consumer's context ended"}
	}
	o := outcome{Status: d.settled, Body: string(dec.Result), Replayed: dec.Outcome == idem.Replay}
	switch {
	case errors.Is(dec.Err, idemqueue.ErrMismatch):
		o.Code = "mismatch"
	case errors.Is(dec.Err, idemqueue.ErrInFlight):
		o.Code = "in-flight"
	case errors.Is(dec.Err, idemqueue.ErrBusy):
		o.Code = "busy"
	case dec.Err != nil:
		o.Err = dec.Err.Error()
	}
	if err != nil {
		o.Err = err.Error()
	}
	if o.Code == "" && o.Err != "" && dec.Outcome != idem.Won {
		o.Body = o.Err
	}
	return o
}

// guarded runs f, turning a panic into an error.
func guarded(f func() ([]byte, error)) (b []byte, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v", p)
		}
	}()
	return f()
}
