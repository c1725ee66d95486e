package idem_test

import (
	"bytes"
	"errors"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"

	"github.com/idemkit/idem"
)

func TestCanonicalJSONExact(t *testing.T) {
	for _, tc := range []struct {
		name, in, want string
	}{
		{"structure as RFC 8785", `{ "b" : [ true, null ], "a" : { "d" : "\u00e9\/", "c" : {} } }`, `{"a":{"c":{},"d":"é/"},"b":[true,null]}`},
		{"integers as they are", `[0, -0, 1, -1, 10, 100, 123456789012345, -1234567890123456789]`, `[0,0,1,-1,10,100,123456789012345,-1234567890123456789]`},
		{"integer forms", `[1.0, 10E-1, 1e0, 0.1e1, 100e-2, 1.000e+0, 0.001E3]`, `[1,1,1,1,1,1,1]`},
		{"zeros", `[-0, 0.0, -0.000, 0e5, -0E-5, 0e99999999999999999999999, -0.0e-99999999999999999999999]`, `[0,0,0,0,0,0,0]`},
		{"integers past float64 precision", `[9007199254740993, 12345678901234567, 12345678901234567890, -9223372036854775809]`, `[9007199254740993,12345678901234567,12345678901234567890,-9223372036854775809]`},
		{"decimals past float64 precision", `[0.10000000000000000001, 1.00000000000000000000001, 333333333.33333329]`, `[0.10000000000000000001,1.00000000000000000000001,333333333.33333329]`},
		{"fractions", `[4.50, 0.1, 0.10, 1e-1, -2.5e1, 1.25e2, 3.0e-1, 12.340]`, `[4.5,0.1,0.1,0.1,-25,125,0.3,12.34]`},
		{"layout as ECMAScript", `[1e20, 1e21, 123456789012345678901, 1234567890123456789012, 0.000001, 1e-7, 1.5e-7, 0.00000123]`, `[100000000000000000000,1e+21,123456789012345678901,1.234567890123456789012e+21,0.000001,1e-7,1.5e-7,0.00000123]`},
		{"beyond float64", `[1e-400, -1e-400, 1e400, 2.5E+308, 5e-325]`, `[1e-400,-1e-400,1e+400,2.5e+308,5e-325]`},
		{"huge exponents", `[1e999999999999999999, 1e-999999999999999999, 12.5e99999999999999999999999, -0.05e-99999999999999999999999, 1e0000000000000000000000000000007]`, `[1e+999999999999999999,1e-999999999999999999,1.25e+100000000000000000000000,-5e-100000000000000000000001,10000000]`},
		{"exponent at the int64 boundary", `[1e999999999999999999, 10e999999999999999999, 0.1e-999999999999999999]`, `[1e+999999999999999999,1e+1000000000000000000,1e-1000000000000000000]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := []byte(tc.in)
			got, err := idem.CanonicalJSONExact(in)
			if err != nil {
				t.Fatalf("CanonicalJSONExact(%s): %v", tc.in, err)
			}
			if string(got) != tc.want {
				t.Fatalf("CanonicalJSONExact(%s)\n got %s\nwant %s", tc.in, got, tc.want)
			}
			if string(in) != tc.in {
				t.Fatalf("CanonicalJSONExact changed its input to %s", in)
			}
			again, err := idem.CanonicalJSONExact(got)
			if err != nil || !bytes.Equal(again, got) {
				t.Fatalf("exact form %s is not its own exact form: %s, %v", got, again, err)
			}
		})
	}
}

// TestCanonicalJSONExactEquivalent: texts of one exact value share a form;
// numbers that differ only past float64 precision, which CanonicalJSON
// equates, do not.
func TestCanonicalJSONExactEquivalent(t *testing.T) {
	groups := [][]string{
		{`{"a":1,"b":2}`, `{"b":2,"a":1.0}`, `{"b":2e0,"a":10E-1}`, " {\n\t\"a\" : 1 ,\r\n \"b\":0.2e1 } ", `{"\u0061":1,"b":2}`},
		{`{"x":[1,"é",null]}`, `{"x":[1e0,"\u00e9",null]}`, `{"x":[0.01e2,"\u00E9",null]}`},
		{`0.1`, `0.10`, `1e-1`, `0.01E1`, `10e-2`},
		{`0`, `-0`, `0.0`, `-0e10`, `0E-3`},
		{`1e21`, `1000000000000000000000`, `1E+21`, `10e20`},
		{`{"id":9007199254740993}`, `{"id":9007199254740993.0}`, `{"id":9.007199254740993e15}`},
		{`1e-400`, `0.1e-399`, `10E-401`},
	}
	exact := func(s string) string {
		t.Helper()
		c, err := idem.CanonicalJSONExact([]byte(s))
		if err != nil {
			t.Fatalf("CanonicalJSONExact(%s): %v", s, err)
		}
		return string(c)
	}
	seen := map[string]int{}
	for g, texts := range groups {
		want := exact(texts[0])
		for _, s := range texts[1:] {
			if got := exact(s); got != want {
				t.Errorf("group %d: %s has the exact form %s, %s has %s", g, texts[0], want, s, got)
			}
		}
		if other, ok := seen[want]; ok {
			t.Errorf("groups %d and %d share the exact form %s", other, g, want)
		}
		seen[want] = g
	}
	for _, tc := range []struct {
		a, b  string
		rfc85 bool // CanonicalJSON equates them
	}{
		{`{"amount":9007199254740993}`, `{"amount":9007199254740992}`, true},
		{`{"id":12345678901234567}`, `{"id":12345678901234568}`, true},
		{`0.10000000000000000001`, `0.1`, true},
		{`1e-400`, `0`, true},
		{`-1e-400`, `1e-400`, true},
		{`1`, `1.0000000000000002`, false},
		{`{"a":1}`, `{"a":"1"}`, false},
		{`[1,2]`, `[2,1]`, false},
		{`1e999999999999999999`, `1e999999999999999998`, false},
		{`1e99999999999999999999`, `-1e99999999999999999999`, false},
		{`1e99999999999999999999`, `1e-99999999999999999999`, false},
	} {
		if a, b := exact(tc.a), exact(tc.b); a == b {
			t.Errorf("%s and %s share the exact form %s", tc.a, tc.b, a)
		}
		if !tc.rfc85 {
			continue
		}
		a, errA := idem.CanonicalJSON([]byte(tc.a))
		b, errB := idem.CanonicalJSON([]byte(tc.b))
		if errA != nil || errB != nil || !bytes.Equal(a, b) {
			t.Errorf("CanonicalJSON(%s) = %s, %v; CanonicalJSON(%s) = %s, %v; want one form (RFC 8785 equates them)", tc.a, a, errA, tc.b, b, errB)
		}
	}
}

// TestCanonicalJSONExactOfRFC8785: an RFC 8785 form is its own exact form,
// so switching a fingerprint from the one to the other changes only bodies
// with numbers a float64 does not hold.
func TestCanonicalJSONExactOfRFC8785(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var in strings.Builder
	in.WriteString(`{"fixed":[0,-0,1,0.1,1.5,100,1e21,1e-7,0.000001,123456789012345680000,5e-324,1.7976931348623157e308],"random":[`)
	for i := range 2000 {
		if i > 0 {
			in.WriteByte(',')
		}
		f := math.Float64frombits(rng.Uint64())
		if math.IsNaN(f) || math.IsInf(f, 0) {
			f = float64(i)
		}
		in.WriteString(strconv.FormatFloat(f, 'e', rng.IntN(20), 64))
	}
	in.WriteString(`]}`)
	rfc, err := idem.CanonicalJSON([]byte(in.String()))
	if err != nil {
		t.Fatal(err)
	}
	exact, err := idem.CanonicalJSONExact(rfc)
	if err != nil || !bytes.Equal(exact, rfc) {
		t.Fatalf("the exact form of an RFC 8785 form differs (%v):\n%s\n%s", err, rfc, exact)
	}
}

// TestCanonicalJSONExactInvalid: what RFC 8785 refuses other than numbers
// is refused, with ErrInvalidJSON.
func TestCanonicalJSONExactInvalid(t *testing.T) {
	for _, in := range []string{``, `{} {}`, `{"a":1,"a":2}`, `{"a":1,"\u0061":2}`, `"\ud800"`, `"\ude00"`, "\"\xff\"", `01`, `1.`, `1e+`, `-`, `.5`, `[1,]`, `NaN`, strings.Repeat("[", 10001) + strings.Repeat("]", 10001)} {
		if got, err := idem.CanonicalJSONExact([]byte(in)); !errors.Is(err, idem.ErrInvalidJSON) {
			t.Errorf("CanonicalJSONExact(%.40q) = %s, %v; want an error wrapping ErrInvalidJSON", in, got, err)
		}
	}
}
