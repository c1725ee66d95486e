package idem_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode/utf16"

	"github.com/idemkit/idem"
)

func TestCanonicalJSON(t *testing.T) {
	for _, tc := range []struct {
		name, in, want string
	}{
		// RFC 8785 section 3.2.2, the sample input and its canonical form.
		{
			"rfc8785 3.2.2 sample",
			"{\n  \"numbers\": [333333333.33333329, 1E30, 4.50,\n              2e-3, 0.000000000000000000000000001],\n" +
				"  \"string\": \"\\u20ac$\\u000F\\u000aA'\\u0042\\u0022\\u005c\\\\\\\"\\/\",\n" +
				"  \"literals\": [null, true, false]\n}",
			`{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],"string":"€$\u000f\nA'B\"\\\\\"/"}`,
		},
		// RFC 8785 section 3.2.3, sorting by UTF-16 code units: U+1F600 (a
		// surrogate pair, 0xD83D first) before U+FB33.
		{
			"rfc8785 3.2.3 sorting",
			`{
  "\u20ac": "Euro Sign",
  "\r": "Carriage Return",
  "\ufb33": "Hebrew Letter Dalet With Dagesh",
  "1": "One",
  "\ud83d\ude00": "Emoji: Grinning Face",
  "\u0080": "Control",
  "\u00f6": "Latin Small Letter O With Diaeresis"
}`,
			"{\"\\r\":\"Carriage Return\",\"1\":\"One\",\"\u0080\":\"Control\",\"ö\":\"Latin Small Letter O With Diaeresis\"," +
				"\"€\":\"Euro Sign\",\"😀\":\"Emoji: Grinning Face\",\"\ufb33\":\"Hebrew Letter Dalet With Dagesh\"}",
		},
		{"literals", ` [ true , false,null ] `, `[true,false,null]`},
		{"scalar at the top", ` "x" `, `"x"`},
		{"empty containers", `{ "a" : [ ], "b" : { } }`, `{"a":[],"b":{}}`},
		{"nested objects sorted", `{"b":{"d":1,"c":2},"a":[{"z":0,"y":1}]}`, `{"a":[{"y":1,"z":0}],"b":{"c":2,"d":1}}`},
		{"sorted by code units, not length", `{"aa":1,"b":2,"a":3,"":4}`, `{"":4,"a":3,"aa":1,"b":2}`},
		{"escaped name sorts by its character", `{"\u0062":1,"a":2}`, `{"a":2,"b":1}`},
		{"escapes as JSON.stringify", `"\u00e9\/\b\f\n\r\t\u0001\u001F\u007f\u2028\"\\"`, "\"é/\\b\\f\\n\\r\\t\\u0001\\u001f\u007f\u2028\\\"\\\\\""},
		{"UTF-8 kept as it is", `"é😀\u00e9"`, `"é😀é"`},
		{"surrogate pair", `"\uD83D\uDE00"`, `"😀"`},
		{"no Unicode normalization", `"e\u0301"`, "\"e\u0301\""},
		{"integer", `[0, -0, 1, -1, 123456789012345, -12345678901234]`, `[0,0,1,-1,123456789012345,-12345678901234]`},
		{"integer forms", `[1.0, 10E-1, 1e0, 0.1e1, 100e-2, -0.0, 0e5, -0E-5]`, `[1,1,1,1,1,0,0,0]`},
		{"large integers", `[9007199254740993, 12345678901234567890, 1e20, 1e21, 123456789012345678901, 1234567890123456789012]`, `[9007199254740992,12345678901234567000,100000000000000000000,1e+21,123456789012345680000,1.2345678901234568e+21]`},
		{"small", `[0.000001, 0.0000001, 1.5e-7, 0.00000123, 5e-324]`, `[0.000001,1e-7,1.5e-7,0.00000123,5e-324]`},
		{"fractions", `[4.50, 0.1, -2.5e1, 1.25e2, 3.0e-1]`, `[4.5,0.1,-25,125,0.3]`},
		{"underflow to zero", `[1e-400, -1e-400]`, `[0,0]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := []byte(tc.in)
			got, err := idem.CanonicalJSON(in)
			if err != nil {
				t.Fatalf("CanonicalJSON(%s): %v", tc.in, err)
			}
			if string(got) != tc.want {
				t.Fatalf("CanonicalJSON(%s)\n got %s\nwant %s", tc.in, got, tc.want)
			}
			if string(in) != tc.in {
				t.Fatalf("CanonicalJSON changed its input to %s", in)
			}
			again, err := idem.CanonicalJSON(got)
			if err != nil || !bytes.Equal(again, got) {
				t.Fatalf("canonical form %s is not its own canonical form: %s, %v", got, again, err)
			}
		})
	}
}

// TestCanonicalJSONNumbers: RFC 8785 appendix B, the IEEE 754 values and
// their ECMAScript form. Each is given to CanonicalJSON as Go writes it
// (shortest digits, 'g'), which denotes the same float64.
func TestCanonicalJSONNumbers(t *testing.T) {
	for _, tc := range []struct {
		bits uint64
		want string
	}{
		{0x0000000000000000, "0"},
		{0x8000000000000000, "0"},
		{0x0000000000000001, "5e-324"},
		{0x8000000000000001, "-5e-324"},
		{0x7fefffffffffffff, "1.7976931348623157e+308"},
		{0xffefffffffffffff, "-1.7976931348623157e+308"},
		{0x4340000000000000, "9007199254740992"},
		{0xc340000000000000, "-9007199254740992"},
		{0x4430000000000000, "295147905179352830000"},
		{0x44b52d02c7e14af5, "9.999999999999997e+22"},
		{0x44b52d02c7e14af6, "1e+23"},
		{0x44b52d02c7e14af7, "1.0000000000000001e+23"},
		{0x444b1ae4d6e2ef4e, "999999999999999700000"},
		{0x444b1ae4d6e2ef4f, "999999999999999900000"},
		{0x444b1ae4d6e2ef50, "1e+21"},
		{0x3eb0c6f7a0b5ed8c, "9.999999999999997e-7"},
		{0x3eb0c6f7a0b5ed8d, "0.000001"},
		{0x41b3de4355555553, "333333333.3333332"},
		{0x41b3de4355555554, "333333333.33333325"},
		{0x41b3de4355555555, "333333333.3333333"},
		{0x41b3de4355555556, "333333333.3333334"},
		{0x41b3de4355555557, "333333333.33333343"},
		{0xbecbf647612f3696, "-0.0000033333333333333333"},
		{0x43143ff3c1cb0959, "1424953923781206.2"},
	} {
		f := math.Float64frombits(tc.bits)
		for _, in := range []string{strconv.FormatFloat(f, 'g', -1, 64), strconv.FormatFloat(f, 'e', 20, 64), tc.want} {
			got, err := idem.CanonicalJSON([]byte(in))
			if err != nil || string(got) != tc.want {
				t.Errorf("%016x given as %s: %s, %v; want %s", tc.bits, in, got, err, tc.want)
			}
		}
	}
}

// TestCanonicalJSONEquivalent: texts of one value share a canonical form;
// texts of different values do not.
func TestCanonicalJSONEquivalent(t *testing.T) {
	groups := [][]string{
		{`{"a":1,"b":2}`, `{"b":2,"a":1.0}`, `{"b":2e0,"a":10E-1}`, " {\n\t\"a\" : 1 ,\r\n \"b\":0.2e1 } ", `{"\u0061":1,"b":2}`},
		{`{"x":[1,"é",null]}`, `{"x":[1e0,"\u00e9",null]}`, `{"x":[0.01e2,"\u00E9",null]}`},
		{`"a/b"`, `"a\/b"`, `"\u0061\u002f\u0062"`},
		{`0`, `-0`, `0.0`, `-0e10`, `0E-3`},
		{`1e21`, `1000000000000000000000`, `1E+21`, `10e20`},
	}
	canon := func(s string) string {
		t.Helper()
		c, err := idem.CanonicalJSON([]byte(s))
		if err != nil {
			t.Fatalf("CanonicalJSON(%s): %v", s, err)
		}
		return string(c)
	}
	seen := map[string]int{}
	for g, texts := range groups {
		want := canon(texts[0])
		for _, s := range texts[1:] {
			if got := canon(s); got != want {
				t.Errorf("group %d: %s canonicalizes to %s, %s to %s", g, texts[0], want, s, got)
			}
		}
		if other, ok := seen[want]; ok {
			t.Errorf("groups %d and %d share the canonical form %s", other, g, want)
		}
		seen[want] = g
	}
	for _, pair := range [][2]string{
		{`{"a":1}`, `{"a":"1"}`},
		{`{"a":1}`, `{"A":1}`},
		{`{"a":1}`, `{"a":1,"b":null}`},
		{`[1,2]`, `[2,1]`},
		{`[1]`, `1`},
		{`1`, `1.0000000000000002`},
		{`"é"`, `"e\u0301"`},
		{`0`, `false`},
		{`""`, `null`},
		{`{}`, `[]`},
	} {
		if a, b := canon(pair[0]), canon(pair[1]); a == b {
			t.Errorf("%s and %s share the canonical form %s", pair[0], pair[1], a)
		}
	}
}

func TestCanonicalJSONInvalid(t *testing.T) {
	for _, tc := range []struct {
		name, in, why string
	}{
		{"empty", ``, "end of input"},
		{"whitespace only", " \n", "end of input"},
		{"two values", `{} {}`, "after the value"},
		{"trailing garbage", `[1]x`, "after the value"},
		{"byte order mark", "\ufeff{}", "value expected"},
		{"duplicate name", `{"a":1,"a":2}`, `"a" occurs twice`},
		{"duplicate name after unescaping", `{"a":1,"\u0061":2}`, `"a" occurs twice`},
		{"duplicate name nested", `{"x":{"b":1,"c":2,"b":1}}`, `"b" occurs twice`},
		{"duplicate empty name", `{"":1,"":1}`, `"" occurs twice`},
		{"lone high surrogate", `"\ud800"`, "lone high surrogate"},
		{"high surrogate then a character", `"\ud800\u0041"`, "lone high surrogate"},
		{"high surrogate then text", `"\uD83Dx"`, "lone high surrogate"},
		{"two high surrogates", `"\ud83d\ud83d"`, "lone high surrogate"},
		{"lone low surrogate", `"\ude00"`, "lone low surrogate"},
		{"lone surrogate in a name", `{"\udc00":1}`, "lone low surrogate"},
		{"invalid UTF-8", "\"\xff\"", "invalid UTF-8"},
		{"UTF-8 encoded surrogate", "\"\xed\xa0\x80\"", "invalid UTF-8"},
		{"truncated UTF-8", "\"\xc3\"", "invalid UTF-8"},
		{"invalid UTF-8 in a name", "{\"\xc0\xaf\":1}", "invalid UTF-8"},
		{"control character", "\"a\nb\"", "control character"},
		{"unterminated string", `"abc`, "unterminated string"},
		{"unknown escape", `"\x41"`, "invalid escape"},
		{"short \\u", `"\u12"`, "four hex digits"},
		{"number too large", `1e400`, "beyond the range"},
		{"negative number too large", `[-1.8e308]`, "beyond the range"},
		{"NaN", `NaN`, "value expected"},
		{"Infinity", `[Infinity]`, "value expected"},
		{"leading zero", `01`, "after the value"},
		{"plus sign", `+1`, "value expected"},
		{"bare minus", `-`, "digit expected"},
		{"dot without digits", `1.`, "digit expected after '.'"},
		{"leading dot", `.5`, "value expected"},
		{"empty exponent", `1e+`, "exponent"},
		{"hex", `0x10`, "after the value"},
		{"truncated literal", `tru`, "is not true"},
		{"capitalised literal", `Null`, "value expected"},
		{"trailing comma in array", `[1,]`, "value expected"},
		{"trailing comma in object", `{"a":1,}`, "property name expected"},
		{"unquoted name", `{a:1}`, "property name expected"},
		{"single quotes", `{'a':1}`, "property name expected"},
		{"missing colon", `{"a" 1}`, "':' expected"},
		{"unclosed array", `[1`, "',' or ']' expected"},
		{"unclosed object", `{"a":1`, "',' or '}' expected"},
		{"too deep", strings.Repeat("[", 10001) + strings.Repeat("]", 10001), "nested deeper"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := idem.CanonicalJSON([]byte(tc.in))
			if !errors.Is(err, idem.ErrInvalidJSON) {
				t.Fatalf("CanonicalJSON(%q) = %s, %v; want an error wrapping ErrInvalidJSON", tc.in, got, err)
			}
			if !strings.Contains(err.Error(), tc.why) {
				t.Fatalf("CanonicalJSON(%q): %v; want it to say %q", tc.in, err, tc.why)
			}
		})
	}
	deep := strings.Repeat(`{"a":[`, 5000) + strings.Repeat(`]}`, 5000)
	if _, err := idem.CanonicalJSON([]byte(deep)); err != nil {
		t.Errorf("10,000 levels: %v", err)
	}
}

// TestCanonicalJSONSortsByUTF16: names made of characters on both sides of
// the places where UTF-16 order and code point order differ (U+E000 to
// U+FFFF against a surrogate pair) come out in UTF-16 order, whatever
// order they went in.
func TestCanonicalJSONSortsByUTF16(t *testing.T) {
	chars := []string{"a", "\u00e9", "\u07ff", "\u0800", "\ud7ff", "\ue000", "\uffff", "\U00010000", "\U0001f600", "\U0010ffff"}
	var names []string
	for _, a := range chars {
		names = append(names, a)
		for _, b := range chars {
			names = append(names, a+b)
		}
	}
	less := func(a, b string) bool {
		ua, ub := utf16.Encode([]rune(a)), utf16.Encode([]rune(b))
		return slices.Compare(ua, ub) < 0
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 20 {
		rng.Shuffle(len(names), func(i, j int) { names[i], names[j] = names[j], names[i] })
		var in strings.Builder
		in.WriteByte('{')
		for i, n := range names {
			if i > 0 {
				in.WriteByte(',')
			}
			name, _ := json.Marshal(n)
			fmt.Fprintf(&in, "%s:%d", name, i)
		}
		in.WriteByte('}')
		out, err := idem.CanonicalJSON([]byte(in.String()))
		if err != nil {
			t.Fatal(err)
		}
		dec := json.NewDecoder(bytes.NewReader(out))
		var got []string
		for {
			tok, err := dec.Token()
			if err != nil {
				break
			}
			if s, ok := tok.(string); ok { // the values are numbers: every string is a name
				got = append(got, s)
			}
		}
		if len(got) != len(names) {
			t.Fatalf("%d names out, %d in", len(got), len(names))
		}
		for i := 1; i < len(got); i++ {
			if !less(got[i-1], got[i]) {
				t.Fatalf("%+q before %+q: not in UTF-16 order", got[i-1], got[i])
			}
		}
	}
}
