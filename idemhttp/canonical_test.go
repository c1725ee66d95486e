package idemhttp_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
)

// target is one request as the fingerprint sees it.
type target struct {
	method, url, body string
}

func (tg target) request() *http.Request {
	method := tg.method
	if method == "" {
		method = http.MethodPost
	}
	url := tg.url
	if url == "" {
		url = "/orders"
	}
	return httptest.NewRequest(method, url, nil)
}

func canonicalFP(tg target) idem.Fingerprint {
	return idemhttp.CanonicalJSONFingerprint(tg.request(), "/orders", []byte(tg.body))
}

func defaultFP(tg target) idem.Fingerprint {
	return idemhttp.DefaultFingerprint(tg.request(), "/orders", []byte(tg.body))
}

// TestCanonicalJSONFingerprint: bodies of one JSON value fingerprint equal
// whatever their serialization; everything DefaultFingerprint tells apart
// (the target, another value, bodies that are not JSON) stays apart.
func TestCanonicalJSONFingerprint(t *testing.T) {
	for _, tc := range []struct {
		name string
		a, b target
		same bool
	}{
		{"property order", target{body: `{"a":1,"b":2}`}, target{body: `{"b":2,"a":1}`}, true},
		{"number forms", target{body: `{"a":1,"b":2}`}, target{body: `{"b":2,"a":1.0}`}, true},
		{"exponents", target{body: `{"a":1,"b":2}`}, target{body: `{"b":2e0,"a":10E-1}`}, true},
		{"whitespace", target{body: `{"a":[1,2],"b":{"c":null}}`}, target{body: "{\n  \"b\": { \"c\": null },\n  \"a\": [ 1, 2 ]\n}\n"}, true},
		{"escapes", target{body: `{"name":"Zoë/€"}`}, target{body: `{"name":"Zo\u00eb\/\u20AC"}`}, true},
		{"decimal forms", target{body: `{"amount":0.1}`}, target{body: `{"amount":0.10}`}, true},
		{"decimal exponent", target{body: `{"amount":0.1}`}, target{body: `{"amount":1e-1}`}, true},
		{"negative zero", target{body: `[0]`}, target{body: `[-0.0]`}, true},
		{"an integer past float64 precision, in its forms", target{body: `{"id":12345678901234567}`}, target{body: `{"id":1.2345678901234567e16}`}, true},
		{"not JSON, same bytes", target{body: "amount=5"}, target{body: "amount=5"}, true},
		{"no body", target{}, target{}, true},

		{"another value", target{body: `{"a":1,"b":2}`}, target{body: `{"a":1,"b":3}`}, false},
		// Values that differ only past float64 precision, which RFC 8785
		// equates: the handler reads them exactly, so they are other requests.
		{"2^53+1 and 2^53", target{body: `{"amount":9007199254740993}`}, target{body: `{"amount":9007199254740992}`}, false},
		{"a 64-bit id", target{body: `{"id":12345678901234567}`}, target{body: `{"id":12345678901234568}`}, false},
		{"a long decimal", target{body: `{"amount":0.10000000000000000001}`}, target{body: `{"amount":0.1}`}, false},
		{"an underflow", target{body: `{"x":1e-400}`}, target{body: `{"x":0}`}, false},
		{"beyond float64, by value", target{body: `{"x":1e400}`}, target{body: `{"x":1e401}`}, false},
		{"a number and a string", target{body: `{"a":1}`}, target{body: `{"a":"1"}`}, false},
		{"array order", target{body: `[1,2]`}, target{body: `[2,1]`}, false},
		{"one more property", target{body: `{"a":1}`}, target{body: `{"a":1,"b":null}`}, false},
		{"name case", target{body: `{"a":1}`}, target{body: `{"A":1}`}, false},
		{"no Unicode normalization", target{body: `"\u00e9"`}, target{body: `"e\u0301"`}, false},
		{"another path", target{url: "/orders/1", body: `{"a":1}`}, target{url: "/orders/2", body: `{"a":1}`}, false},
		{"another query", target{url: "/orders?x=1", body: `{"a":1}`}, target{url: "/orders?x=2", body: `{"a":1}`}, false},
		{"another host", target{url: "http://a.example/orders", body: `{"a":1}`}, target{url: "http://b.example/orders", body: `{"a":1}`}, false},
		{"another method", target{method: http.MethodPost, body: `{"a":1}`}, target{method: http.MethodPatch, body: `{"a":1}`}, false},
		{"not JSON, other bytes", target{body: "amount=5"}, target{body: "amount=6"}, false},
		{"broken JSON and its fix", target{body: `{"a":1,`}, target{body: `{"a":1}`}, false},
		{"repeated name, by its bytes", target{body: `{"a":1,"a":2}`}, target{body: `{"a":2}`}, false},
		{"repeated name reordered, by its bytes", target{body: `{"a":1,"a":2}`}, target{body: `{"a":2,"a":1}`}, false},
		{"lone surrogate, by its bytes", target{body: `{"a":"\ud800"}`}, target{body: `{"a":"\uD800"}`}, false},
		{"invalid UTF-8, by its bytes", target{body: "{\"a\":\"\xff\"}"}, target{body: "{\"a\":\"\xfe\"}"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := canonicalFP(tc.a), canonicalFP(tc.b)
			if (a == b) != tc.same {
				t.Fatalf("%+v and %+v: fingerprints equal = %v, want %v", tc.a, tc.b, a == b, tc.same)
			}
		})
	}
}

// TestCanonicalJSONFingerprintIsDefaultOfCanonical: a body with no
// canonical form, and one already canonical (idem.CanonicalJSONExact's
// form, which RFC 8785's is too), fingerprint as under
// DefaultFingerprint, so switching changes only the other JSON bodies.
func TestCanonicalJSONFingerprintIsDefaultOfCanonical(t *testing.T) {
	for _, tc := range []struct {
		body string
		same bool
	}{
		{"", true},
		{"amount=5", true},
		{"idemhttp form v1 sha256:00", true},
		{`{"a":1,"a":2}`, true},
		{`"\udc00"`, true},
		{`{"a":1,"b":[true,null,"x"]}`, true},
		{`{"id":9007199254740993,"x":1e-400}`, true},
		{`[0.1,1.5,1e+21,1e-7]`, true},
		{`0.10`, false},
		{`{"b":1,"a":2}`, false},
		{`{"a": 1}`, false},
		{`1.0`, false},
	} {
		tg := target{url: "/orders?x=1", body: tc.body}
		if got := canonicalFP(tg) == defaultFP(tg); got != tc.same {
			t.Errorf("body %q: canonical fingerprint == default: %v, want %v", tc.body, got, tc.same)
		}
		canonical, err := idem.CanonicalJSONExact([]byte(tc.body))
		if err != nil {
			continue
		}
		if canonicalFP(tg) != defaultFP(target{url: tg.url, body: string(canonical)}) {
			t.Errorf("body %q: the canonical fingerprint is not the default one of %s", tc.body, canonical)
		}
	}
}

// TestCanonicalJSONFingerprintMiddleware: through the middleware, a retry
// that re-serializes its body replays under CanonicalJSONFingerprint and is
// a mismatch under the default; another value is a mismatch under both,
// even one that differs only past float64 precision.
func TestCanonicalJSONFingerprintMiddleware(t *testing.T) {
	for _, tc := range []struct {
		name        string
		fingerprint func(*http.Request, string, []byte) idem.Fingerprint
		reordered   int
	}{
		{"canonical", idemhttp.CanonicalJSONFingerprint, http.StatusCreated},
		{"default", nil, http.StatusUnprocessableEntity},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mw, err := idemhttp.New(newStore(t), idemhttp.Config{
				Principal:   func(*http.Request) string { return "p" },
				Fingerprint: tc.fingerprint,
			})
			if err != nil {
				t.Fatal(err)
			}
			runs := 0
			mux := http.NewServeMux()
			mux.Handle("POST /orders", mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				runs++
				w.WriteHeader(http.StatusCreated)
			})))
			send := func(key, body string) int {
				req := httptest.NewRequest(http.MethodPost, "/orders", strings.NewReader(body))
				req.Header.Set(idemhttp.HeaderKey, key)
				rec := httptest.NewRecorder()
				mux.ServeHTTP(rec, req)
				return rec.Code
			}
			for _, step := range []struct {
				key, body string
				want      int
			}{
				{"k1", `{"item":88,"qty":1.0}`, http.StatusCreated},
				{"k1", `{"item":88,"qty":1.0}`, http.StatusCreated},
				{"k1", `{ "qty": 1, "item": 8.8e1 }`, tc.reordered},
				{"k1", `{"item":88,"qty":2}`, http.StatusUnprocessableEntity},
				{"k2", `not json`, http.StatusCreated},
				{"k2", `not json`, http.StatusCreated},
				{"k2", `not  json`, http.StatusUnprocessableEntity},
				// A second order under a reused key, whose 64-bit id differs
				// only past float64 precision, is not the first one.
				{"k3", `{"id":12345678901234567,"qty":1}`, http.StatusCreated},
				{"k3", `{"id":12345678901234568,"qty":1}`, http.StatusUnprocessableEntity},
			} {
				if got := send(step.key, step.body); got != step.want {
					t.Fatalf("key %s, body %s: %d, want %d", step.key, step.body, got, step.want)
				}
			}
			if runs != 3 {
				t.Fatalf("the handler ran %d times, want 3 (once per key)", runs)
			}
		})
	}
}
