package idemhttptest

import (
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/idemkit/idem/conformance"
	"github.com/idemkit/idem/idemhttp"
)

func testMissingKey[TTx any](t *testing.T, b conformance.Backend[TTx]) {
	e := setup(t, b, options[TTx]{})
	r := e.send(call{noKey: true, body: `{"item":1}`})
	e.expectProblem("", r, http.StatusBadRequest, "key-missing")
	if !strings.Contains(string(r.body), idemhttp.HeaderKey) {
		e.Fatalf("", "problem %s does not name the %s header", r.body, idemhttp.HeaderKey)
	}
	e.expectRows("", 0, 0, 0)
}

func testMalformedKey[TTx any](t *testing.T, b conformance.Backend[TTx]) {
	e := setup(t, b, options[TTx]{})
	for _, tc := range []struct {
		name string
		keys []string
	}{
		{"empty", []string{""}},
		{"256 bytes", []string{strings.Repeat("k", 256)}},
		{"tab", []string{"abc\tdef"}},
		{"newline", []string{"abc\ndef"}},
		{"DEL", []string{"abc\x7f"}},
		{"not ASCII", []string{"clé-1"}},
		{"not UTF-8", []string{"k\xff"}},
		{"two headers", []string{"k1", "k2"}},
	} {
		r := e.send(call{keys: tc.keys, body: "x"})
		e.expectProblem(fmt.Sprintf("%q (%s)", tc.keys, tc.name), r, http.StatusBadRequest, "key-invalid")
	}
	e.expectRows("", 0, 0, 0)
	// The longest valid key, with every printable ASCII byte, works.
	var printable strings.Builder
	for c := byte(0x20); c <= 0x7e; c++ {
		printable.WriteByte(c)
	}
	long := (printable.String() + strings.Repeat("k", 255))[:255]
	if r := e.send(call{key: long, body: "x"}); r.status != http.StatusCreated {
		e.Fatalf(long, "longest valid key: %d %s, want 201", r.status, r.body)
	}
	e.expectRows(long, 1, 1, 1)
}

func testSafeMethod[TTx any](t *testing.T, b conformance.Backend[TTx]) {
	e := setup(t, b, options[TTx]{})
	r := e.send(call{method: http.MethodGet, noKey: true})
	if r.status != http.StatusOK || string(r.body) != "no transaction" {
		e.Fatalf("", "GET without a key: %d %q, want 200 from the handler without a transaction", r.status, r.body)
	}
	if got := r.header.Get(idemhttp.HeaderRetention); got != "" {
		e.Fatalf("", "unprotected GET carries %s %q", idemhttp.HeaderRetention, got)
	}
	e.expectRows("", 0, 0, 0)
}

func testReplay[TTx any](t *testing.T, b conformance.Backend[TTx]) {
	e := setup(t, b, options[TTx]{})
	const key = "replay-1"
	first := e.send(call{key: key, body: `{"item":88}`})
	if first.status != http.StatusCreated || first.header.Get("Location") != "/orders/1" {
		e.Fatalf(key, "first: %d Location %q, want 201 /orders/1", first.status, first.header.Get("Location"))
	}
	if first.header.Get(idemhttp.HeaderReplayed) != "" {
		e.Fatalf(key, "first answer carries %s", idemhttp.HeaderReplayed)
	}
	if first.header.Get("Set-Cookie") != "session=s1" || first.header.Get("X-Hop") == "" {
		e.Fatalf(key, "first answer lacks the handler's own headers: %v", first.header)
	}
	e.expectRetention(key, first)
	for range 2 {
		again := e.send(call{key: key, body: `{"item":88}`})
		// Never stored: the cookie, and the Connection header with what it lists.
		e.expectReplay(key, first, again, "Set-Cookie", "Connection", "X-Hop")
		if again.header.Get("Location") != "/orders/1" || !reflect.DeepEqual(again.header["X-Multi"], []string{"first", "second"}) {
			e.Fatalf(key, "replay headers %v, want Location /orders/1 and X-Multi in order", again.header)
		}
	}
	e.expectRows(key, 1, 1, 1)
}

func testStoreHeader[TTx any](t *testing.T, b conformance.Backend[TTx]) {
	e := setup(t, b, options[TTx]{http: idemhttp.Config{
		StoreHeader: func(name string) bool {
			return name == "Set-Cookie" || (name != "X-Multi" && idemhttp.DefaultStoreHeader(name))
		},
	}})
	const key = "store-header-1"
	first := e.send(call{key: key, body: "x"})
	again := e.send(call{key: key, body: "x"})
	e.expectReplay(key, first, again, "X-Multi", "Connection", "X-Hop")
	if again.header.Get("Set-Cookie") != "session=s1" {
		e.Fatalf(key, "configured to store Set-Cookie, replay has %v", again.header)
	}
	e.expectRows(key, 1, 1, 1)
}

func testImplicitStatus[TTx any](t *testing.T, b conformance.Backend[TTx]) {
	e := setup(t, b, options[TTx]{handler: func(e *env[TTx], w http.ResponseWriter, r *http.Request) {
		if !e.writeEffect(w, r) {
			return
		}
		if r.URL.Path == "/other" {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		fmt.Fprint(w, "<html><body>ok</body></html>")
	}})
	const key = "implicit-1"
	first := e.send(call{key: key, body: "x"})
	if first.status != http.StatusOK || first.header.Get("Content-Type") != "text/html; charset=utf-8" {
		e.Fatalf(key, "first: %d %v, want 200 with a sniffed text/html type", first.status, first.header)
	}
	e.expectReplay(key, first, e.send(call{key: key, body: "x"}))

	const empty = "no-content-1"
	first = e.send(call{key: empty, path: "/other", body: "x"})
	if first.status != http.StatusNoContent || len(first.body) != 0 {
		e.Fatalf(empty, "first: %d %q, want 204 without a body", first.status, first.body)
	}
	e.expectReplay(empty, first, e.send(call{key: empty, path: "/other", body: "x"}))
	e.expectRows(key, 2, 2, 2)
}

func testClientErrorStored[TTx any](t *testing.T, b conformance.Backend[TTx]) {
	e := setup(t, b, options[TTx]{handler: func(e *env[TTx], w http.ResponseWriter, r *http.Request) {
		tx, _ := idemhttp.Tx[TTx](r.Context())
		if err := e.effect(r.Context(), tx, e.runs.Add(1)); err != nil { // an audit row, say
			idemhttp.Fail(w, r, err)
			return
		}
		http.Error(w, "item 88 is out of stock", http.StatusConflict)
	}})
	const key = "client-error-1"
	first := e.send(call{key: key, body: "x"})
	if first.status != http.StatusConflict {
		e.Fatalf(key, "first: %d, want the handler's 409", first.status)
	}
	e.expectReplay(key, first, e.send(call{key: key, body: "x"}))
	e.expectRows(key, 1, 1, 1)
}

func testMismatch[TTx any](t *testing.T, b conformance.Backend[TTx]) {
	e := setup(t, b, options[TTx]{})
	const key = "mismatch-1"
	if r := e.send(call{key: key, body: `{"item":88}`}); r.status != http.StatusCreated {
		e.Fatalf(key, "first: %d", r.status)
	}
	e.expectProblem(key, e.send(call{key: key, body: `{"item":89}`}), http.StatusUnprocessableEntity, "key-mismatch")
	e.expectProblem(key, e.send(call{key: key, path: "/orders?coupon=1", body: `{"item":88}`}), http.StatusUnprocessableEntity, "key-mismatch")
	e.expectRows(key, 1, 1, 1)
}

func testScopes[TTx any](t *testing.T, b conformance.Backend[TTx]) {
	e := setup(t, b, options[TTx]{})
	const key = "shared-key"
	for i, c := range []call{
		{key: key, body: "x"},
		{key: key, body: "x", principal: "p2"},
		{key: key, body: "x", path: "/other"},
		{key: key, body: "x", method: http.MethodPatch},
	} {
		if r := e.send(c); r.status != http.StatusCreated || r.header.Get(idemhttp.HeaderReplayed) != "" {
			e.Fatalf(key, "request %d (%s %s as %s): %d %v, want a fresh 201", i, c.method, c.path, c.principal, r.status, r.header)
		}
	}
	e.expectRows(key, 4, 4, 4)
}
