package idemhttp

import (
	"bytes"
	"encoding/json"
	"errors"
	"math/big"
	"net/http"
	"net/url"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/idemkit/idem"
)

// validKey is the rule stated independently of the code: 1 to 255 bytes,
// each printable ASCII.
func validKey(k string) bool {
	if len(k) < 1 || len(k) > 255 {
		return false
	}
	for i := 0; i < len(k); i++ {
		if k[i] < 0x20 || k[i] > 0x7e {
			return false
		}
	}
	return true
}

// sfQuote writes key as an RFC 8941 sf-string.
func sfQuote(key string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(key) + `"`
}

// FuzzKey: reading the header never panics. A bare value is accepted
// exactly when it is 1 to 255 printable ASCII bytes, and returned unchanged;
// a value starting with a double quote is an sf-string: accepted only when
// it is the quoted form of a valid key, which it returns. Every valid key
// also round-trips through its quoted form, and a repeated header is always
// refused.
func FuzzKey(f *testing.F) {
	for _, seed := range []string{"", "k", "order-4711", " ", "~", "\x7f", "\x00", "\t", "clé", "\xff", strings.Repeat("k", 255), strings.Repeat("k", 256),
		`"abc"`, `"a\"b"`, `"a\\b"`, `"abc`, `"a\b"`, `"abc";p=1`, `""`, `"\"`, `"é"`} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, k string) {
		got, err := keyFrom(http.Header{HeaderKey: {k}})
		if err != nil && !errors.Is(err, idem.ErrInvalidKey) {
			t.Fatalf("keyFrom(%q): %v does not wrap idem.ErrInvalidKey", k, err)
		}
		if strings.HasPrefix(k, `"`) {
			if err == nil && (!validKey(got) || sfQuote(got) != k) {
				t.Fatalf("keyFrom(%q) = %q, which is not the key this sf-string quotes", k, got)
			}
		} else {
			if want := validKey(k); (err == nil) != want {
				t.Fatalf("keyFrom(%q): err %v, want valid=%v", k, err, want)
			}
			if err == nil && got != k {
				t.Fatalf("keyFrom(%q) = %q, want the key unchanged", k, got)
			}
		}
		if validKey(k) {
			if got, err := keyFrom(http.Header{HeaderKey: {sfQuote(k)}}); err != nil || got != k {
				t.Fatalf("quoted form %s of the valid key %q: %q, %v", sfQuote(k), k, got, err)
			}
		}
		if _, err := keyFrom(http.Header{HeaderKey: {k, k}}); !errors.Is(err, idem.ErrInvalidKey) {
			t.Fatalf("two headers %q: %v, want ErrInvalidKey", k, err)
		}
	})
}

// resplit cuts the concatenation of parts at new places given by cuts.
func resplit(parts []string, cuts []uint8) []string {
	s := strings.Join(parts, "")
	out := make([]string, len(parts))
	at := 0
	for i := range len(parts) - 1 {
		n := 0
		if len(s)-at > 0 {
			n = int(cuts[i]) % (len(s) - at + 1)
		}
		out[i] = s[at : at+n]
		at += n
	}
	out[len(parts)-1] = s[at:]
	return out
}

func equal(a, b []string) bool {
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// fingerprint is the default fingerprint of the parts method, route,
// host, path, query and body, for a request no pattern matched.
func fingerprint(p []string) idem.Fingerprint {
	r := &http.Request{Method: p[0], Host: p[2], URL: &url.URL{Path: p[3], RawQuery: p[4]}}
	return DefaultFingerprint(r, p[1], []byte(p[5]))
}

// FuzzFingerprint: the default fingerprint of (method, route, host, path,
// query, body) is deterministic, and the same bytes split differently
// between the parts give a different fingerprint (the framing is
// unambiguous). Hosts compare case-insensitively.
func FuzzFingerprint(f *testing.F) {
	f.Add("POST", "/orders", "api.example", "/orders", "", `{"item":88}`, uint8(0), uint8(0), uint8(0), uint8(0), uint8(0))
	f.Add("POST", "/orders", "", "/orders/1", "a=1", "", uint8(5), uint8(7), uint8(3), uint8(1), uint8(2))
	f.Add("PATCH", "POST /orders/{id}", "h", "/orders/2", "", "x", uint8(4), uint8(1), uint8(250), uint8(9), uint8(0))
	f.Add("", "", "", "", "", "", uint8(0), uint8(0), uint8(0), uint8(0), uint8(0))
	f.Fuzz(func(t *testing.T, method, route, host, path, query, body string, c1, c2, c3, c4, c5 uint8) {
		p := []string{method, route, asciiLower(host), path, query, body}
		fp := fingerprint(p)
		if fp != fingerprint(append([]string(nil), p...)) {
			t.Fatalf("fingerprint of %q is not deterministic", p)
		}
		upper := append([]string(nil), p...)
		up := []byte(host)
		for i, c := range up {
			if 'a' <= c && c <= 'z' {
				up[i] = c - ('a' - 'A')
			}
		}
		upper[2] = string(up)
		if fingerprint(upper) != fp {
			t.Fatalf("hosts %q and %q fingerprint differently", host, upper[2])
		}
		q := resplit(p, []uint8{c1, c2, c3, c4, c5})
		q[2] = asciiLower(q[2])
		if equal(p, q) != (fp == fingerprint(q)) {
			t.Fatalf("parts %q and %q: equal=%v but fingerprints equal=%v", p, q, equal(p, q), fp == fingerprint(q))
		}
	})
}

// FuzzScope: every scope built from a principal, a method token and a
// route is one idem accepts, and different triples never share a scope,
// however the bytes are split between them.
func FuzzScope(f *testing.F) {
	f.Add("tenant-7", "POST", "POST /orders", uint8(0), uint8(3), uint8(0))
	f.Add(`a" "b`, "POST", `c" "d`, uint8(2), uint8(5), uint8(1))
	f.Add(strings.Repeat("p", 300), "PATCH", "/x", uint8(9), uint8(200), uint8(3))
	f.Add("\x00\xff\u2028", "POST", "/\t", uint8(1), uint8(1), uint8(7))
	f.Fuzz(func(t *testing.T, principal, method, route string, c1, c2, c3 uint8) {
		if !isToken(method) {
			t.Skip("only configured methods, which are tokens, reach Scope")
		}
		s := Scope(principal, method, route)
		if err := (idem.Request{Scope: s, Key: "k"}).Validate(); err != nil {
			t.Fatalf("Scope(%q, %q, %q) = %q: %v", principal, method, route, s, err)
		}
		p := []string{principal, route}
		q := resplit(p, []uint8{c1})
		if !equal(p, q) && Scope(q[0], method, q[1]) == s {
			t.Fatalf("principal/route %q and %q share the scope %q", p, q, s)
		}
		p = []string{method, route, principal}
		q = resplit(p, []uint8{c2, c3})
		if isToken(q[0]) && !equal(p, q) && Scope(q[2], q[0], q[1]) == s {
			t.Fatalf("method/route/principal %q and %q share the scope %q", p, q, s)
		}
		if other := method + "X"; Scope(principal, other, route) == s {
			t.Fatalf("methods %q and %q share the scope %q", method, other, s)
		}
	})
}

// FuzzCanonicalJSON: idem.CanonicalJSON accepts exactly the JSON that
// encoding/json accepts, less what RFC 8785 refuses (invalid UTF-8, a
// lone surrogate, a repeated name, a number beyond a float64). What it
// accepts, its canonical form decodes to the same value, is its own
// canonical form, and is the canonical form of encoding/json's own
// serialization of that value: equal values, equal forms.
//
// idem.CanonicalJSONExact accepts the same, and numbers beyond a float64
// too. Its form is its own, an RFC 8785 form is its own, and two texts
// share it exactly when they decode to equal values with every number
// compared exactly (json.Number, as big.Rat): the input, its exact form,
// its RFC 8785 form (which differs when a number does not survive a
// float64) and encoding/json's serialization of its json.Number value.
// The fingerprint follows: the default one of the exact form for a body
// that has one, of the bytes otherwise.
func FuzzCanonicalJSON(f *testing.F) {
	for _, seed := range []string{
		`{"numbers":[333333333.33333329,1E30,4.50,2e-3,0.000000000000000000000000001],"string":"\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/","literals":[null,true,false]}`,
		`{"\u20ac":1,"\r":2,"\ufb33":3,"1":4,"\ud83d\ude00":5,"\u0080":6,"\u00f6":7}`,
		`{"b":2e0,"a":10E-1}`, ` [ -0, 1e21, 1e-7, 0.000001, 9007199254740993, 5e-324 ] `,
		`{"a":1,"a":2}`, `{"a":{"a":1},"b":{"a":1}}`, `"\ud800"`, `"\ude00x"`, "\"\xff\"", `1e400`, `-1e-400`,
		`"\\ud800"`, `[]`, `{}`, `""`, `null`, `{"a":[{"c":3,"b":2}],"":0}`, `01`, `[1,]`, "",
		`{"id":12345678901234567,"amount":0.10000000000000000001}`, `[0.1,0.10,1e-1,100e-3]`,
		`[1e999999999999999999,-0.05e-99999999999999999999999,1e0000000000000000000000000000007,0e99999999999999999999]`,
	} {
		f.Add(seed)
	}
	r := &http.Request{Method: http.MethodPost, URL: &url.URL{Path: "/orders"}}
	f.Fuzz(func(t *testing.T, body string) {
		in := []byte(body)
		c, err := idem.CanonicalJSON(in)
		e, errExact := idem.CanonicalJSONExact(in)
		// The exact form refuses what RFC 8785 refuses, but for a number
		// (after which the text may still be bad).
		rangeOnly := err != nil && strings.Contains(err.Error(), "beyond the range of a float64")
		if (errExact != nil && err == nil) || (errExact == nil && err != nil && !rangeOnly) {
			t.Fatalf("%q: CanonicalJSON: %v; CanonicalJSONExact: %v", body, err, errExact)
		}
		if errExact != nil {
			if !errors.Is(errExact, idem.ErrInvalidJSON) {
				t.Fatalf("CanonicalJSONExact(%q): %v does not wrap ErrInvalidJSON", body, errExact)
			}
			if CanonicalJSONFingerprint(r, "/orders", in) != DefaultFingerprint(r, "/orders", in) {
				t.Fatalf("body %q without a canonical form is not fingerprinted byte for byte", body)
			}
		} else {
			checkExact(t, r, in, e, c)
		}
		valid := json.Valid(in)
		if err != nil {
			if !errors.Is(err, idem.ErrInvalidJSON) {
				t.Fatalf("CanonicalJSON(%q): %v does not wrap ErrInvalidJSON", body, err)
			}
			if valid && !refusedByRFC8785(in) {
				t.Fatalf("CanonicalJSON(%q): %v; encoding/json accepts it and no rule of RFC 8785 refuses it", body, err)
			}
			return
		}
		if !valid {
			t.Fatalf("CanonicalJSON(%q) = %s, but encoding/json refuses it", body, c)
		}
		if again, err := idem.CanonicalJSON(c); err != nil || !bytes.Equal(again, c) {
			t.Fatalf("CanonicalJSON(%q) = %s, whose canonical form is %s, %v", body, c, again, err)
		}
		var v, cv any
		if err := json.Unmarshal(in, &v); err != nil {
			t.Fatalf("CanonicalJSON accepted %q, which encoding/json cannot decode: %v", body, err)
		}
		if err := json.Unmarshal(c, &cv); err != nil || !reflect.DeepEqual(v, cv) {
			t.Fatalf("%q decodes to %#v, its canonical form %s to %#v (%v)", body, v, c, cv, err)
		}
		m, err := json.Marshal(v)
		if err != nil {
			t.Fatalf("json.Marshal(%#v): %v", v, err)
		}
		if mc, err := idem.CanonicalJSON(m); err != nil || !bytes.Equal(mc, c) {
			t.Fatalf("%q and %s, encoding/json's serialization of its value, canonicalize to %s and %s (%v)", body, m, c, mc, err)
		}
	})
}

// checkExact checks the exact form e of in (and c, in's RFC 8785 form, or
// nil when it has none) as FuzzCanonicalJSON says.
func checkExact(t *testing.T, r *http.Request, in, e, c []byte) {
	t.Helper()
	if !json.Valid(in) {
		t.Fatalf("CanonicalJSONExact(%q) = %s, but encoding/json refuses it", in, e)
	}
	if again, err := idem.CanonicalJSONExact(e); err != nil || !bytes.Equal(again, e) {
		t.Fatalf("CanonicalJSONExact(%q) = %s, whose exact form is %s, %v", in, e, again, err)
	}
	v := decodeNumbers(t, in)
	if ev := decodeNumbers(t, e); !sameValue(v, ev) {
		t.Fatalf("%q and its exact form %s decode to other values: %#v, %#v", in, e, v, ev)
	}
	if c != nil {
		ce, err := idem.CanonicalJSONExact(c)
		if err != nil || !bytes.Equal(ce, c) {
			t.Fatalf("the RFC 8785 form %s is not its own exact form: %s, %v", c, ce, err)
		}
		if same := sameValue(v, decodeNumbers(t, c)); same != bytes.Equal(ce, e) {
			t.Fatalf("%q and its RFC 8785 form %s: equal values exactly = %v, but exact forms %s and %s", in, c, same, e, ce)
		}
	}
	m, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("json.Marshal(%#v): %v", v, err)
	}
	if me, err := idem.CanonicalJSONExact(m); err != nil || !bytes.Equal(me, e) {
		t.Fatalf("%q and %s, encoding/json's serialization of its value, have the exact forms %s and %s (%v)", in, m, e, me, err)
	}
	if CanonicalJSONFingerprint(r, "/orders", in) != CanonicalJSONFingerprint(r, "/orders", m) {
		t.Fatalf("%q and %s, one value, fingerprint differently", in, m)
	}
	if CanonicalJSONFingerprint(r, "/orders", in) != DefaultFingerprint(r, "/orders", e) {
		t.Fatalf("the canonical fingerprint of %q is not the default one of %s", in, e)
	}
}

// decodeNumbers decodes the JSON text b with numbers as json.Number.
func decodeNumbers(t *testing.T, b []byte) any {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("%q: %v", b, err)
	}
	return v
}

// sameValue reports whether two values decoded by decodeNumbers are equal,
// their numbers compared by exact value (sameNumber).
func sameValue(a, b any) bool {
	switch a := a.(type) {
	case map[string]any:
		b, ok := b.(map[string]any)
		if !ok || len(a) != len(b) {
			return false
		}
		for k, av := range a {
			if bv, ok := b[k]; !ok || !sameValue(av, bv) {
				return false
			}
		}
		return true
	case []any:
		b, ok := b.([]any)
		if !ok || len(a) != len(b) {
			return false
		}
		for i := range a {
			if !sameValue(a[i], b[i]) {
				return false
			}
		}
		return true
	case json.Number:
		b, ok := b.(json.Number)
		return ok && sameNumber(string(a), string(b))
	default:
		return a == b
	}
}

// sameNumber reports whether the JSON numbers a and b have one exact value:
// each is a mantissa (a big.Rat, from the digits before any exponent) times
// ten to its exponent (a big.Int, of any size), and the two are compared
// at the smaller exponent, unless the exponents are so far apart that the
// mantissas (between 10^-n and 10^n for n digits) cannot make up for it.
func sameNumber(a, b string) bool {
	ma, xa := splitNumber(a)
	mb, xb := splitNumber(b)
	if ma.Sign() == 0 || mb.Sign() == 0 {
		return ma.Sign() == mb.Sign()
	}
	d := new(big.Int).Sub(xa, xb)
	if d.CmpAbs(big.NewInt(int64(len(a)+len(b)))) > 0 {
		return false
	}
	scale := new(big.Rat).SetInt(new(big.Int).Exp(big.NewInt(10), new(big.Int).Abs(d), nil))
	if d.Sign() > 0 {
		ma.Mul(ma, scale)
	} else {
		mb.Mul(mb, scale)
	}
	return ma.Cmp(mb) == 0
}

// splitNumber splits the JSON number s into its mantissa and exponent.
func splitNumber(s string) (*big.Rat, *big.Int) {
	mantissa, exp, _ := strings.Cut(strings.ToLower(s), "e")
	m, ok := new(big.Rat).SetString(mantissa)
	if !ok {
		panic("not a JSON number: " + s)
	}
	x := new(big.Int)
	if exp != "" {
		if _, ok := x.SetString(strings.TrimPrefix(exp, "+"), 10); !ok {
			panic("not a JSON number: " + s)
		}
	}
	return m, x
}

// refusedByRFC8785 reports whether JSON that encoding/json accepts breaks
// a rule of RFC 8785 (I-JSON), found here without idem's parser: invalid
// UTF-8, an escaped surrogate (a lone one among them: a pair is excused
// too), a name repeated in one object, or a number encoding/json cannot
// decode into a float64.
func refusedByRFC8785(body []byte) bool {
	if !utf8.Valid(body) {
		return true
	}
	for i := 0; i+5 < len(body); i++ {
		if body[i] != '\\' {
			continue
		}
		if body[i+1] == 'u' && (body[i+2] == 'd' || body[i+2] == 'D') && strings.IndexByte("89abcdefABCDEF", body[i+3]) >= 0 {
			return true
		}
		i++ // the escaped character
	}
	var v any
	if json.Unmarshal(body, &v) != nil {
		return true
	}
	return repeatsAName(body)
}

// repeatsAName reports whether an object in the JSON text body has a name
// twice, walking encoding/json's tokens.
func repeatsAName(body []byte) bool {
	type frame struct {
		names    map[string]bool // nil in an array
		wantName bool
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	var stack []*frame
	for {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, &frame{names: map[string]bool{}, wantName: true})
			continue
		case json.Delim('['):
			stack = append(stack, &frame{})
			continue
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
			if len(stack) > 0 && stack[len(stack)-1].names != nil {
				stack[len(stack)-1].wantName = true
			}
			continue
		}
		if top == nil || top.names == nil {
			continue
		}
		if top.wantName {
			name := tok.(string)
			if top.names[name] {
				return true
			}
			top.names[name] = true
			top.wantName = false
		} else {
			top.wantName = true
		}
	}
}
