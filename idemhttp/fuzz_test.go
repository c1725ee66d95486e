package idemhttp

import (
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"

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
