package transports

import (
	"fmt"
	"strings"

	"pgregory.net/rapid"
)

// A request as the test draws it, before a transport puts it on its wire.
type request struct {
	User   string  // who sends it: the auth layer makes it the principal
	Route  string  // routeOrders or routeRefunds
	ID     string  // the path value of routeOrders
	Query  string  // the raw query
	Kind   string  // kindJSON, kindForm, kindMultipart or kindEmpty
	Fields []field // the body's fields, in the order sent
	Gzip   bool    // the body is gzip-encoded (only with a gzip layer)
	Large  bool    // the body is over every limit (only with a limit layer)
	Key    string
	Answer answer // what the handler answers
	Style  string // how it answers: styleWrite, or styleError (the framework renders an error)
	Fault  string // faultNone or one of the faults
}

type field struct{ Name, Value string }

// The routes: one with a path value, one without.
const (
	routeOrders  = "orders"  // POST /orders/{id}
	routeRefunds = "refunds" // POST /refunds
)

// Body kinds.
const (
	kindJSON      = "json"
	kindForm      = "form"
	kindMultipart = "multipart"
	kindEmpty     = "empty"
)

// How the handler answers.
const (
	styleWrite = "write" // it writes its answer
	styleError = "error" // it returns the framework's error for it (echo's HTTPError, gin's Abort)
)

// Faults.
const (
	faultNone   = "none"
	faultFail   = "fail"   // the handler fails (idemhttp.Fail, a returned error)
	faultPanic  = "panic"  // the handler panics (only with a recoverer)
	faultRetry  = "retry"  // the first run meets a retryable database error
	faultFailed = "failed" // a statement fails (unique violation) before it answers
	faultSlow   = "slow"   // it takes a few milliseconds
	faultHangup = "hangup" // the client hangs up while it runs
)

// answer is the status the handler chooses, transport-neutral.
type answer string

const (
	answerCreated     answer = "created"     // 201, OK
	answerOK          answer = "ok"          // 200, OK
	answerConflict    answer = "conflict"    // 409, AlreadyExists: a client's mistake, stored
	answerUnavailable answer = "unavailable" // 503, Unavailable: "not now", never stored
)

// stored reports whether idem stores the answer (see idem.DefaultStoreStatus
// and the RPC adapters' DefaultStoreCode).
func (a answer) stored() bool { return a != answerUnavailable }

// httpStatus is the answer's HTTP status.
func (a answer) httpStatus() int {
	switch a {
	case answerCreated:
		return 201
	case answerOK:
		return 200
	case answerConflict:
		return 409
	default:
		return 503
	}
}

// sk identifies a key's record: the principal, the route (part of every
// transport's scope) and the key.
type sk struct{ User, Route, Key string }

func (r request) sk() sk { return sk{r.User, r.Route, r.Key} }

// String is the request in one line, as a step of a failure's story.
func (r request) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s key=%q to %s", r.User, r.Key, r.target())
	switch {
	case r.Large:
		fmt.Fprintf(&b, " with a large %s body", r.Kind)
	case r.Kind == kindEmpty:
		b.WriteString(" with no body")
	default:
		fmt.Fprintf(&b, " with %s body %s", r.Kind, r.fieldsString())
	}
	if r.Gzip {
		b.WriteString(" gzipped")
	}
	fmt.Fprintf(&b, "; the handler answers %s", r.Answer)
	if r.Style != styleWrite {
		fmt.Fprintf(&b, " (as a returned %s)", r.Style)
	}
	if r.Fault != faultNone {
		fmt.Fprintf(&b, ", fault %s", r.Fault)
	}
	return b.String()
}

func (r request) target() string {
	t := "/refunds"
	if r.Route == routeOrders {
		t = "/orders/" + r.ID
	}
	if r.Query != "" {
		t += "?" + r.Query
	}
	return t
}

func (r request) fieldsString() string {
	parts := make([]string, len(r.Fields))
	for i, f := range r.Fields {
		parts[i] = f.Name + "=" + f.Value
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

// features is what a transport lets a sequence draw.
type features struct {
	kinds    []string // body kinds it carries
	users    []string // principals
	styles   []string // answer styles
	gzip     bool     // a gzip layer is in the stack
	large    bool     // a body limit is in the stack (or idem's own)
	faults   []string // faults drawn
	routes   []string
	rejectID bool // draw keys that are not valid idempotency keys (queues)
}

// drawRequest draws one request. Small pools on purpose: keys, users,
// routes and bodies collide often, which is where wrong answers live.
func drawRequest(t *rapid.T, f features) request {
	r := request{
		User:  rapid.SampledFrom(f.users).Draw(t, "user"),
		Route: rapid.SampledFrom(f.routes).Draw(t, "route"),
		Query: rapid.SampledFrom([]string{"", "", "a=1", "a=2", "a=1&b=2", "b=2&a=1"}).Draw(t, "query"),
		Kind:  rapid.SampledFrom(f.kinds).Draw(t, "kind"),
		Key:   rapid.SampledFrom([]string{"k1", "k2"}).Draw(t, "key"),
		Answer: rapid.SampledFrom([]answer{answerCreated, answerOK, answerConflict, answerUnavailable}).
			Draw(t, "answer"),
		Style: rapid.SampledFrom(f.styles).Draw(t, "style"),
		Fault: rapid.SampledFrom(f.faults).Draw(t, "fault"),
	}
	if f.rejectID && rapid.IntRange(0, 9).Draw(t, "bad key") == 0 {
		r.Key = "kö" // a message id that is not printable ASCII: not a valid idempotency key
	}
	if r.Route == routeOrders {
		r.ID = rapid.SampledFrom([]string{"1", "2"}).Draw(t, "id")
	}
	if r.Kind != kindEmpty {
		r.Fields = []field{{"amount", rapid.SampledFrom([]string{"10", "20"}).Draw(t, "amount")}}
		if rapid.Bool().Draw(t, "currency") {
			c := field{"currency", "EUR"}
			if rapid.Bool().Draw(t, "currency first") {
				r.Fields = append([]field{c}, r.Fields...)
			} else {
				r.Fields = append(r.Fields, c)
			}
		}
	}
	if f.gzip && r.Kind != kindEmpty {
		r.Gzip = rapid.Bool().Draw(t, "gzip")
	}
	if f.large && r.Kind == kindJSON {
		r.Large = rapid.IntRange(0, 7).Draw(t, "large") == 0
	}
	return r
}
