package idemqueue_test

import (
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemqueue"
)

// TestCanonicalJSONFingerprint: a message republished under its id with
// its JSON data serialized anew is a replay under CanonicalJSONFingerprint
// (a mismatch under the default); another value, or other bytes of data
// that is not JSON, is a mismatch under both.
func TestCanonicalJSONFingerprint(t *testing.T) {
	for _, tc := range []struct {
		name         string
		fingerprint  func(idemqueue.Message) idem.Fingerprint
		reserialized idem.Outcome
	}{
		{"canonical", idemqueue.CanonicalJSONFingerprint, idem.Replay},
		{"default", nil, idem.Mismatch},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := newOrders(t, idem.Config{})
			c := newConsumer(t, o, idemqueue.Config{Fingerprint: tc.fingerprint})
			for _, step := range []struct {
				id, data string
				want     idem.Outcome
			}{
				{"m-1", `{"order":4711,"total":12.50}`, idem.Won},
				{"m-1", `{"order":4711,"total":12.50}`, idem.Replay},
				{"m-1", `{ "total": 12.5, "order": 4.711e3 }`, tc.reserialized},
				{"m-1", `{"order":4711,"total":13}`, idem.Mismatch},
				{"m-2", `plain text`, idem.Won},
				{"m-2", `plain text`, idem.Replay},
				{"m-2", `plain  text`, idem.Mismatch},
			} {
				if d := c.Process(t.Context(), msg("orders.new", step.id, step.data), o.handle); d.Outcome != step.want {
					t.Fatalf("%s with %s: %v (%+v), want %v", step.id, step.data, d.Outcome, d, step.want)
				}
			}
			if n := o.count(t); n != 2 {
				t.Fatalf("%d orders, want 2 (one per message)", n)
			}
		})
	}
	for _, data := range []string{"", "plain text", `{"a":1,"a":2}`, `{"a":1}`} {
		m := msg("q", "id", data)
		if idemqueue.CanonicalJSONFingerprint(m) != idemqueue.DefaultFingerprint(m) {
			t.Errorf("data %q: the canonical fingerprint is not the default one", data)
		}
	}
}
