package conformance

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/idemkit/idem"
)

// The model's reference: what a store must hold after a sequence of
// operations, in plain Go maps, decided without a database. model.go runs
// the operations on a real store and compares every answer and every
// record with what this file decides.

// slot is one key of the model: a scope and a key.
type slot struct{ scope, key string }

// String names the slot in a step's line; a long key by its start and
// length.
func (s slot) String() string {
	if len(s.key) > 16 {
		return fmt.Sprintf("%s/%s...(%d bytes)", s.scope, s.key[:4], len(s.key))
	}
	return s.scope + "/" + s.key
}

// refRecord is a row of the store's table as the model expects it. The
// model keeps rows whose retention passed until a purge, a delete or a
// takeover removes or replaces them, as the table does.
type refRecord struct {
	body        string // the request body that claimed the key
	fingerprint idem.Fingerprint
	completed   bool
	response    idem.Response
	created     time.Time
	expires     time.Time
	token       int64
	leaseUntil  time.Time // zero: no lease (claimed in one transaction, or completed)
	step        string
	stepData    []byte
	// intention names the work the record stands for: the claim that
	// started it, kept across lease takeovers that resume it.
	intention int
	// holder is the lease claim that won the record last (0: none): the
	// only one whose writes it takes, whatever the tokens say.
	holder int
	// abandoned: claimed in the caller's transaction, which committed
	// without the response (a user's bug the store must still survive).
	abandoned bool
}

func (r *refRecord) live(now time.Time) bool { return now.Before(r.expires) }
func (r *refRecord) pending() bool           { return !r.completed }
func (r *refRecord) leaseEnded(now time.Time) bool {
	return !r.leaseUntil.IsZero() && !now.Before(r.leaseUntil)
}

// refModel is the whole reference state.
type refModel struct {
	rows map[slot]*refRecord
	// floor is the table's token floor: the largest token a delete or a
	// purge removed.
	floor int64
	// topToken is, per slot, the largest fencing token it ever had, across
	// all its lifetimes.
	topToken map[slot]int64
	// effects counts, per label, the committed effect rows the model
	// expects: written in the same transaction as a claim's completion or a
	// recorded step, so a label is 1 or absent.
	effects    map[string]int
	intentions int
}

func newRefModel() *refModel {
	return &refModel{rows: map[slot]*refRecord{}, topToken: map[slot]int64{}, effects: map[string]int{}}
}

// live returns the slot's record while its retention runs, else nil.
func (m *refModel) live(s slot, now time.Time) *refRecord {
	if r := m.rows[s]; r != nil && r.live(now) {
		return r
	}
	return nil
}

// claimOutcome is what a claim of s by a request with body decides, in a
// transaction (Do, Store.Claim) or in lease mode. resume is set for a lease
// claim that takes over its own intention's ended lease.
func (m *refModel) claimOutcome(s slot, body string, now time.Time, leaseMode bool) (out idem.Outcome, resume bool) {
	r := m.live(s, now)
	switch {
	case r == nil:
		return idem.Won, false
	case r.body != body:
		return idem.Mismatch, false
	case r.completed:
		return idem.Replay, false
	case leaseMode && r.leaseEnded(now):
		return idem.Won, true
	default:
		return idem.InFlight, false
	}
}

// newIntention starts a record for s: a new row, or the takeover of one
// whose retention passed. A lease claim (holder > 0) gets a token above
// the floor and above the row's own; a claim in one transaction keeps a new
// row at 0 and bumps a taken-over row's token.
func (m *refModel) newIntention(s slot, body string, now time.Time, retention, lease time.Duration, holder int) *refRecord {
	old := m.rows[s]
	m.intentions++
	r := &refRecord{body: body, fingerprint: fingerprintOf(body), created: now, expires: now.Add(retention),
		intention: m.intentions, holder: holder}
	switch {
	case lease > 0 && old == nil:
		r.token = m.floor + 1
	case lease > 0:
		r.token = max(old.token, m.floor) + 1
	case old != nil:
		r.token = old.token + 1
	}
	if lease > 0 {
		r.leaseUntil = now.Add(lease)
		r.expires = laterOf(r.expires, r.leaseUntil)
	} else {
		// A claim in one transaction sets the expiry a grace further.
		r.expires = r.expires.Add(idem.ExpiryGrace(retention))
	}
	m.rows[s] = r
	return r
}

// resume takes over the ended lease of the slot's pending record for
// holder.
func (m *refModel) resume(s slot, now time.Time, lease time.Duration, holder int) *refRecord {
	r := m.rows[s]
	r.token++
	r.holder = holder
	r.leaseUntil = now.Add(lease)
	r.expires = laterOf(r.expires, r.leaseUntil)
	return r
}

// fenced reports whether holder may still write the slot's record: it
// won the record's last lease claim, and the record is pending with a
// lease. Tokens are the store's means to this end, not the model's.
func (m *refModel) fenced(s slot, holder int) bool {
	r := m.rows[s]
	return r != nil && r.holder == holder && r.pending() && !r.leaseUntil.IsZero()
}

// extend moves a held lease's end, as Extend and RecordStep do.
func (m *refModel) extend(s slot, now time.Time, lease time.Duration) {
	r := m.rows[s]
	r.leaseUntil = now.Add(lease)
	r.expires = laterOf(r.expires, r.leaseUntil)
}

// complete stores resp as the slot's outcome.
func (m *refModel) complete(s slot, resp idem.Response, now time.Time, retention time.Duration) {
	r := m.rows[s]
	r.completed, r.response, r.abandoned = true, storedForm(resp), false
	if r.leaseUntil.IsZero() {
		// A claim in one transaction: the expiry moves only when the work
		// ran past the claim's grace.
		r.expires = laterOf(r.expires, now.Add(retention))
	} else {
		r.expires = now.Add(retention)
	}
	r.leaseUntil = time.Time{}
}

// remove deletes the slot's row and raises the floor to its token.
func (m *refModel) remove(s slot) {
	if r := m.rows[s]; r != nil {
		m.floor = max(m.floor, r.token)
		delete(m.rows, s)
	}
}

// purge removes every row whose retention passed, returning how many.
func (m *refModel) purge(now time.Time) int64 {
	var n int64
	for _, s := range slices.Collect(maps.Keys(m.rows)) {
		if !m.rows[s].live(now) {
			m.remove(s)
			n++
		}
	}
	return n
}

// sawToken records a token the store handed out for s and reports why it
// breaks the fencing promise, or "".
func (m *refModel) sawToken(s slot, token int64) string {
	top := m.topToken[s]
	if token <= top {
		return fmt.Sprintf("token %d is not above %d, the key's largest token so far", token, top)
	}
	m.topToken[s] = token
	return ""
}

// storedForm is resp as a replay gives it back: a nil body is empty.
func storedForm(resp idem.Response) idem.Response {
	if resp.Body == nil {
		resp.Body = []byte{}
	}
	return resp
}

// fingerprintOf is the fingerprint of the model's request with body.
func fingerprintOf(body string) idem.Fingerprint {
	return idem.FingerprintRequest("POST", "/model", []byte(body))
}

func laterOf(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// describeRecord is a record for a failure message.
func describeRecord(completed bool, status int, body []byte, token int64, created, expires, leaseUntil time.Time, step string) string {
	state := "pending"
	if completed {
		state = fmt.Sprintf("completed %d %q", status, body)
	}
	lease := "no lease"
	if !leaseUntil.IsZero() {
		lease = "lease until " + leaseUntil.Format(time.RFC3339Nano)
	}
	return fmt.Sprintf("%s, token %d, created %s, expires %s, %s, step %q", state, token,
		created.Format(time.RFC3339Nano), expires.Format(time.RFC3339Nano), lease, step)
}

// releaseLease ends a pending record's lease as ReleaseLease does: at the
// claim's time (or now, if the clock went back past it), so that a release
// is told from a lapse.
func (m *refModel) releaseLease(s slot, now time.Time) {
	rec := m.rows[s]
	rec.leaseUntil = rec.created
	if now.Before(rec.created) {
		rec.leaseUntil = now
	}
}
