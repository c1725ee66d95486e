package idemhttp

import (
	"bytes"
	"encoding/json"
	"errors"
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
// serialization of that value: equal values, equal forms. The fingerprint
// follows: the canonical one for a body with a canonical form, the default
// one otherwise.
func FuzzCanonicalJSON(f *testing.F) {
	for _, seed := range []string{
		`{"numbers":[333333333.33333329,1E30,4.50,2e-3,0.000000000000000000000000001],"string":"\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/","literals":[null,true,false]}`,
		`{"\u20ac":1,"\r":2,"\ufb33":3,"1":4,"\ud83d\ude00":5,"\u0080":6,"\u00f6":7}`,
		`{"b":2e0,"a":10E-1}`, ` [ -0, 1e21, 1e-7, 0.000001, 9007199254740993, 5e-324 ] `,
		`{"a":1,"a":2}`, `{"a":{"a":1},"b":{"a":1}}`, `"\ud800"`, `"\ude00x"`, "\"\xff\"", `1e400`, `-1e-400`,
		`"\\ud800"`, `[]`, `{}`, `""`, `null`, `{"a":[{"c":3,"b":2}],"":0}`, `01`, `[1,]`, "",
	} {
		f.Add(seed)
	}
	r := &http.Request{Method: http.MethodPost, URL: &url.URL{Path: "/orders"}}
	f.Fuzz(func(t *testing.T, body string) {
		in := []byte(body)
		c, err := idem.CanonicalJSON(in)
		valid := json.Valid(in)
		if err != nil {
			if !errors.Is(err, idem.ErrInvalidJSON) {
				t.Fatalf("CanonicalJSON(%q): %v does not wrap ErrInvalidJSON", body, err)
			}
			if valid && !refusedByRFC8785(in) {
				t.Fatalf("CanonicalJSON(%q): %v; encoding/json accepts it and no rule of RFC 8785 refuses it", body, err)
			}
			if CanonicalJSONFingerprint(r, "/orders", in) != DefaultFingerprint(r, "/orders", in) {
				t.Fatalf("body %q without a canonical form is not fingerprinted byte for byte", body)
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
		if CanonicalJSONFingerprint(r, "/orders", in) != CanonicalJSONFingerprint(r, "/orders", m) {
			t.Fatalf("%q and %s, one value, fingerprint differently", body, m)
		}
		if CanonicalJSONFingerprint(r, "/orders", in) != DefaultFingerprint(r, "/orders", c) {
			t.Fatalf("the canonical fingerprint of %q is not the default one of %s", body, c)
		}
	})
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
