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
	for _, tc := range []struct {
		a, b string
		same bool
	}{
		{`{"a":1,"b":2}`, `{"b":2,"a":1.0}`, true},
		{`{"a":1,"b":2}`, `{"b":2e0,"a":10E-1}`, true},
		{`{"total":0.1}`, `{"total":0.10}`, true},
		{`{"total":0.1}`, `{"total":1e-1}`, true},
		{`[-0]`, `[0]`, true},
		// Values that differ only past float64 precision, which RFC 8785
		// equates: a consumer reads them exactly, so they are other messages.
		{`{"amount":9007199254740993}`, `{"amount":9007199254740992}`, false},
		{`{"id":12345678901234567}`, `{"id":12345678901234568}`, false},
		{`{"total":0.10000000000000000001}`, `{"total":0.1}`, false},
		{`{"x":1e-400}`, `{"x":0}`, false},
	} {
		a := idemqueue.CanonicalJSONFingerprint(msg("q", "id", tc.a))
		b := idemqueue.CanonicalJSONFingerprint(msg("q", "id", tc.b))
		if (a == b) != tc.same {
			t.Errorf("data %s and %s: fingerprints equal = %v, want %v", tc.a, tc.b, a == b, tc.same)
		}
	}
	for _, data := range []string{"", "plain text", `{"a":1,"a":2}`, `{"a":1}`, `{"id":9007199254740993}`} {
		m := msg("q", "id", data)
		if idemqueue.CanonicalJSONFingerprint(m) != idemqueue.DefaultFingerprint(m) {
			t.Errorf("data %q: the canonical fingerprint is not the default one", data)
		}
	}
}
