package idem

import (
	"errors"
	"fmt"
	"math/big"
	"slices"
	"strconv"
	"unicode/utf8"
)

// ErrInvalidJSON is the error of CanonicalJSON and CanonicalJSONExact for
// bytes that are not one JSON text they can canonicalize: not JSON at all,
// or JSON outside the I-JSON subset that RFC 8785 requires (a repeated
// property name, invalid UTF-8, an escaped lone surrogate, and for
// CanonicalJSON a number beyond the range of a float64), or nested deeper
// than 10,000 arrays and objects.
var ErrInvalidJSON = errors.New("idem: JSON cannot be canonicalized")

// maxJSONDepth bounds nesting, as encoding/json does, so that a body of
// brackets cannot exhaust the stack.
const maxJSONDepth = 10000

// CanonicalJSON returns the RFC 8785 (JSON Canonicalization Scheme)
// canonical form of the JSON text body: no whitespace between tokens,
// object properties sorted by the UTF-16 code units of their names, strings
// escaped as ECMAScript's JSON.stringify escapes them (only '"', '\' and
// control characters, the latter as \b, \t, \n, \f, \r or \u00xx), and
// every number written as ECMAScript writes the float64 it denotes
// (1.0, 10E-1 and 1 are all 1; 1e21 is 1e+21; -0 is 0). Two texts that
// decode to the same value therefore have the same canonical form.
//
// Numbers are equated as float64s, as RFC 8785 specifies: numbers that
// differ only past float64 precision share a form (9007199254740993 is
// 9007199254740992, 0.10000000000000000001 is 0.1, 1e-400 is 0). That is
// wrong for a Fingerprint when the receiver reads numbers exactly (as
// int64, json.Number or decimals): use CanonicalJSONExact there.
//
// It fails, with an error wrapping ErrInvalidJSON that says what and at
// which offset, for anything RFC 8785 cannot canonicalize: text that is
// not exactly one JSON value, a property name repeated in one object
// (after unescaping: "a" and "\u0061" are the same name), invalid UTF-8,
// an escaped surrogate that is not half of a pair, a number too large for
// a float64, or nesting deeper than 10,000. It never changes body.
func CanonicalJSON(body []byte) ([]byte, error) {
	return canonicalize(body, false)
}

// CanonicalJSONExact returns the canonical form of the JSON text body that
// compares numbers by their exact decimal value: CanonicalJSON's form
// (properties sorted, no whitespace, strings escaped one way) except that
// each number is written as the exact value of its text in one normal
// form: its significant digits, with no leading or trailing zeros, laid
// out as ECMAScript lays out a float64's digits, "-" for a negative one,
// and 0 for zero and -0. So 1, 1.0, 10E-1 and 0.1e1 share a form, as do
// 0.1, 0.10 and 1e-1; but 9007199254740993 and 9007199254740992 do not,
// nor 0.10000000000000000001 and 0.1, nor 1e-400 and 0. A number of any
// size or exponent is accepted (1e999999999 is 1e+999999999). It is what
// the JSON fingerprints (idemhttp.CanonicalJSONFingerprint,
// idemqueue.CanonicalJSONFingerprint) hash: two bodies share a form only
// when they hold the same value, read exactly.
//
// The form is JSON, and is its own form. An RFC 8785 form is one too, so
// a body already in RFC 8785 form is in this one, and the two forms of a
// body differ only where a number's value does not survive a round trip
// through a float64 (9007199254740993, 0.10000000000000000001, 1e-400,
// 1e400, which CanonicalJSON refuses). It fails as
// CanonicalJSON does, wrapping ErrInvalidJSON, except that it never
// refuses a number. It never changes body.
func CanonicalJSONExact(body []byte) ([]byte, error) {
	return canonicalize(body, true)
}

// canonicalize is CanonicalJSON, or CanonicalJSONExact when exact.
func canonicalize(body []byte, exact bool) ([]byte, error) {
	c := canonicalizer{in: body, out: make([]byte, 0, len(body)), exact: exact}
	c.space()
	if err := c.value(0); err != nil {
		return nil, err
	}
	c.space()
	if c.pos < len(c.in) {
		return nil, c.fail("%s after the value", c.what())
	}
	return c.out, nil
}

// canonicalizer writes the canonical form of in to out as it parses. An
// object's members are written in the order they come, then moved into
// sorted order once the object ends.
type canonicalizer struct {
	in  []byte
	pos int
	out []byte
	// names holds the decoded names of the objects being parsed, and
	// members their members, for every object from the outermost to the
	// current one: an object uses the tail it appended and truncates it
	// when it ends.
	names   []byte
	members []member
	// exact writes every number as its exact decimal value
	// (CanonicalJSONExact) instead of as the float64 it denotes.
	exact bool
	// scratch is where an object's members are copied to be written back
	// in order, and where a number's digits are joined.
	scratch []byte
}

// member is one property of an object being parsed: its decoded name,
// names[nameStart:nameEnd], and its canonical form "name":value,
// out[start:end].
type member struct {
	nameStart, nameEnd int
	start, end         int
}

func (c *canonicalizer) fail(format string, args ...any) error {
	return fmt.Errorf("%w: %s at offset %d", ErrInvalidJSON, fmt.Sprintf(format, args...), c.pos)
}

// what names the input at pos for an error message.
func (c *canonicalizer) what() string {
	if c.pos >= len(c.in) {
		return "end of input"
	}
	if b := c.in[c.pos]; b >= 0x20 && b < 0x7f {
		return fmt.Sprintf("%q", b)
	}
	return fmt.Sprintf("byte 0x%02x", c.in[c.pos])
}

// space skips JSON's four whitespace characters.
func (c *canonicalizer) space() {
	for c.pos < len(c.in) {
		switch c.in[c.pos] {
		case ' ', '\t', '\n', '\r':
			c.pos++
		default:
			return
		}
	}
}

func (c *canonicalizer) value(depth int) error {
	if c.pos >= len(c.in) {
		return c.fail("a value expected, got end of input")
	}
	switch b := c.in[c.pos]; {
	case b == '{':
		return c.object(depth + 1)
	case b == '[':
		return c.array(depth + 1)
	case b == '"':
		return c.str(false)
	case b == '-' || ('0' <= b && b <= '9'):
		return c.number()
	case b == 't':
		return c.literal("true")
	case b == 'f':
		return c.literal("false")
	case b == 'n':
		return c.literal("null")
	default:
		return c.fail("a value expected, got %s", c.what())
	}
}

func (c *canonicalizer) literal(lit string) error {
	if len(c.in)-c.pos < len(lit) || string(c.in[c.pos:c.pos+len(lit)]) != lit {
		return c.fail("%s is not %s", c.what(), lit)
	}
	c.pos += len(lit)
	c.out = append(c.out, lit...)
	return nil
}

func (c *canonicalizer) array(depth int) error {
	if depth > maxJSONDepth {
		return c.fail("nested deeper than %d", maxJSONDepth)
	}
	c.pos++ // '['
	c.out = append(c.out, '[')
	c.space()
	if c.pos < len(c.in) && c.in[c.pos] == ']' {
		c.pos++
		c.out = append(c.out, ']')
		return nil
	}
	for {
		if err := c.value(depth); err != nil {
			return err
		}
		c.space()
		if c.pos >= len(c.in) {
			return c.fail("',' or ']' expected, got end of input")
		}
		switch c.in[c.pos] {
		case ',':
			c.pos++
			c.out = append(c.out, ',')
			c.space()
		case ']':
			c.pos++
			c.out = append(c.out, ']')
			return nil
		default:
			return c.fail("',' or ']' expected, got %s", c.what())
		}
	}
}

func (c *canonicalizer) object(depth int) error {
	if depth > maxJSONDepth {
		return c.fail("nested deeper than %d", maxJSONDepth)
	}
	open, at := len(c.out), c.pos
	c.pos++ // '{'
	c.out = append(c.out, '{')
	c.space()
	if c.pos < len(c.in) && c.in[c.pos] == '}' {
		c.pos++
		c.out = append(c.out, '}')
		return nil
	}
	first, names := len(c.members), len(c.names)
	defer func() {
		c.members = c.members[:first]
		c.names = c.names[:names]
	}()
	for {
		if c.pos >= len(c.in) || c.in[c.pos] != '"' {
			return c.fail("a property name expected, got %s", c.what())
		}
		m := member{nameStart: len(c.names), start: len(c.out)}
		if err := c.str(true); err != nil {
			return err
		}
		m.nameEnd = len(c.names)
		c.space()
		if c.pos >= len(c.in) || c.in[c.pos] != ':' {
			return c.fail("':' expected, got %s", c.what())
		}
		c.pos++
		c.out = append(c.out, ':')
		c.space()
		if err := c.value(depth); err != nil {
			return err
		}
		m.end = len(c.out)
		c.members = append(c.members, m)
		c.space()
		if c.pos >= len(c.in) {
			return c.fail("',' or '}' expected, got end of input")
		}
		if c.in[c.pos] == '}' {
			c.pos++
			break
		}
		if c.in[c.pos] != ',' {
			return c.fail("',' or '}' expected, got %s", c.what())
		}
		c.pos++
		c.out = append(c.out, ',')
		c.space()
	}
	return c.sortMembers(open, at, c.members[first:])
}

// sortMembers rewrites the object written from out[open] (its '{') with its
// members ms sorted by name, closing it with '}'. A name that occurs twice
// is an error; at is the object's offset in the input.
func (c *canonicalizer) sortMembers(open, at int, ms []member) error {
	cmp := func(a, b member) int {
		return compareUTF16(c.names[a.nameStart:a.nameEnd], c.names[b.nameStart:b.nameEnd])
	}
	sorted := slices.IsSortedFunc(ms, cmp)
	if !sorted {
		slices.SortStableFunc(ms, cmp)
	}
	for i := 1; i < len(ms); i++ {
		if cmp(ms[i-1], ms[i]) == 0 {
			return fmt.Errorf("%w: property name %q occurs twice in the object at offset %d", ErrInvalidJSON, c.names[ms[i].nameStart:ms[i].nameEnd], at)
		}
	}
	if !sorted {
		c.scratch = append(c.scratch[:0], c.out[open:]...)
		c.out = c.out[:open+1] // '{'
		for i, m := range ms {
			if i > 0 {
				c.out = append(c.out, ',')
			}
			c.out = append(c.out, c.scratch[m.start-open:m.end-open]...)
		}
	}
	c.out = append(c.out, '}')
	return nil
}

// compareUTF16 orders two UTF-8 strings by their UTF-16 code units, as RFC
// 8785 sorts property names. It differs from byte order only between a
// character above U+FFFF (a surrogate pair, 0xD800-0xDBFF first) and one
// from U+E000 to U+FFFF.
func compareUTF16(a, b []byte) int {
	i := 0
	for i < len(a) && i < len(b) && a[i] == b[i] {
		i++
	}
	if i == len(a) || i == len(b) {
		return len(a) - len(b)
	}
	for i > 0 && a[i]&0xC0 == 0x80 { // back to the start of the characters that differ
		i--
	}
	ra, _ := utf8.DecodeRune(a[i:])
	rb, _ := utf8.DecodeRune(b[i:])
	if ua, ub := firstUTF16(ra), firstUTF16(rb); ua != ub {
		return int(ua) - int(ub)
	}
	return int(ra) - int(rb) // one high surrogate: the low ones follow the code points
}

// firstUTF16 is the first UTF-16 code unit of r.
func firstUTF16(r rune) rune {
	if r < 0x10000 {
		return r
	}
	return 0xD800 + (r-0x10000)>>10
}

// str parses the string at pos (its opening quote) and writes it escaped as
// JSON.stringify does; a name is also appended, decoded, to names.
func (c *canonicalizer) str(name bool) error {
	c.pos++ // '"'
	c.out = append(c.out, '"')
	for {
		// The run of characters written as they are.
		start := c.pos
		for c.pos < len(c.in) {
			b := c.in[c.pos]
			if b == '"' || b == '\\' || b < 0x20 {
				break
			}
			if b < utf8.RuneSelf {
				c.pos++
				continue
			}
			r, n := utf8.DecodeRune(c.in[c.pos:])
			if r == utf8.RuneError && n == 1 {
				return c.fail("invalid UTF-8 in a string")
			}
			c.pos += n
		}
		c.out = append(c.out, c.in[start:c.pos]...)
		if name {
			c.names = append(c.names, c.in[start:c.pos]...)
		}
		if c.pos >= len(c.in) {
			return c.fail("unterminated string")
		}
		switch b := c.in[c.pos]; {
		case b == '"':
			c.pos++
			c.out = append(c.out, '"')
			return nil
		case b < 0x20:
			return c.fail("control character 0x%02x in a string", b)
		}
		r, err := c.escape()
		if err != nil {
			return err
		}
		c.out = appendStringRune(c.out, r)
		if name {
			c.names = utf8.AppendRune(c.names, r)
		}
	}
}

// escape parses the escape sequence at pos (its backslash) and returns the
// character it stands for; a \u escape of a surrogate must be the first
// half of a pair, followed by the second.
func (c *canonicalizer) escape() (rune, error) {
	if c.pos+1 >= len(c.in) {
		c.pos++
		return 0, c.fail("unterminated escape")
	}
	switch e := c.in[c.pos+1]; e {
	case '"', '\\', '/':
		c.pos += 2
		return rune(e), nil
	case 'b':
		c.pos += 2
		return '\b', nil
	case 'f':
		c.pos += 2
		return '\f', nil
	case 'n':
		c.pos += 2
		return '\n', nil
	case 'r':
		c.pos += 2
		return '\r', nil
	case 't':
		c.pos += 2
		return '\t', nil
	case 'u':
	default:
		c.pos++
		return 0, c.fail("invalid escape \\%s", c.what())
	}
	at := c.pos
	r, ok := c.hex4()
	if !ok {
		return 0, c.fail("\\u needs four hex digits")
	}
	switch {
	case 0xDC00 <= r && r <= 0xDFFF:
		c.pos = at
		return 0, c.fail("lone low surrogate \\u%04x", r)
	case 0xD800 <= r && r <= 0xDBFF:
		lo, ok := c.hex4()
		if !ok || lo < 0xDC00 || lo > 0xDFFF {
			c.pos = at
			return 0, c.fail("lone high surrogate \\u%04x", r)
		}
		return 0x10000 + (r-0xD800)<<10 + (lo - 0xDC00), nil
	}
	return r, nil
}

// hex4 parses \uXXXX at pos and advances past it when it is one.
func (c *canonicalizer) hex4() (rune, bool) {
	if len(c.in)-c.pos < 6 || c.in[c.pos] != '\\' || c.in[c.pos+1] != 'u' {
		return 0, false
	}
	var r rune
	for _, b := range c.in[c.pos+2 : c.pos+6] {
		switch {
		case '0' <= b && b <= '9':
			r = r<<4 | rune(b-'0')
		case 'a' <= b && b <= 'f':
			r = r<<4 | rune(b-'a'+10)
		case 'A' <= b && b <= 'F':
			r = r<<4 | rune(b-'A'+10)
		default:
			return 0, false
		}
	}
	c.pos += 6
	return r, true
}

// appendStringRune appends r as JSON.stringify writes it inside a string:
// '"' and '\' escaped, the control characters with a short escape where
// there is one and as \u00xx (lower-case hex) otherwise, everything else
// as its UTF-8.
func appendStringRune(dst []byte, r rune) []byte {
	switch r {
	case '"', '\\':
		return append(dst, '\\', byte(r))
	case '\b':
		return append(dst, '\\', 'b')
	case '\f':
		return append(dst, '\\', 'f')
	case '\n':
		return append(dst, '\\', 'n')
	case '\r':
		return append(dst, '\\', 'r')
	case '\t':
		return append(dst, '\\', 't')
	}
	if r < 0x20 {
		const hex = "0123456789abcdef"
		return append(dst, '\\', 'u', '0', '0', hex[r>>4], hex[r&0xF])
	}
	return utf8.AppendRune(dst, r)
}

// number parses the number at pos, which must follow JSON's grammar, and
// writes the float64 it denotes as ECMAScript does or, for the exact form,
// its exact decimal value (exactNumber).
func (c *canonicalizer) number() error {
	start := c.pos
	if c.in[c.pos] == '-' {
		c.pos++
	}
	intStart := c.pos
	switch {
	case c.pos < len(c.in) && c.in[c.pos] == '0':
		c.pos++
	case c.pos < len(c.in) && '1' <= c.in[c.pos] && c.in[c.pos] <= '9':
		c.digits()
	default:
		return c.fail("a digit expected, got %s", c.what())
	}
	integer := c.pos
	fracStart, fracEnd := c.pos, c.pos
	if c.pos < len(c.in) && c.in[c.pos] == '.' {
		c.pos++
		fracStart = c.pos
		if c.digits() == 0 {
			return c.fail("a digit expected after '.', got %s", c.what())
		}
		fracEnd = c.pos
	}
	expStart, expEnd := c.pos, c.pos
	if c.pos < len(c.in) && (c.in[c.pos] == 'e' || c.in[c.pos] == 'E') {
		c.pos++
		expStart = c.pos
		if c.pos < len(c.in) && (c.in[c.pos] == '+' || c.in[c.pos] == '-') {
			c.pos++
		}
		if c.digits() == 0 {
			return c.fail("a digit expected in the exponent, got %s", c.what())
		}
		expEnd = c.pos
	}
	lit := c.in[start:c.pos]
	if c.exact {
		c.out = appendExactNumber(c.out, c.in[intStart:integer], c.in[fracStart:fracEnd], c.in[expStart:expEnd], start < intStart, &c.scratch)
		return nil
	}
	// An integer of at most 15 digits is a float64 exactly, and ECMAScript
	// writes it as it is (but -0 as 0).
	if c.pos == integer && len(lit) <= 15 {
		if string(lit) == "-0" {
			lit = lit[1:]
		}
		c.out = append(c.out, lit...)
		return nil
	}
	f, err := strconv.ParseFloat(string(lit), 64)
	if err != nil { // syntax was checked: only ±Inf for a number too large
		c.pos = start
		return c.fail("number %s is beyond the range of a float64", lit)
	}
	c.out = appendECMAScriptNumber(c.out, f)
	return nil
}

// appendExactNumber appends the number with integer digits in, fraction
// digits frac and exponent exp (its digits, maybe signed; empty for none)
// as its exact decimal value in one normal form: the significant digits
// (those from the first non-zero one to the last non-zero one) laid out as
// ECMAScript lays out a float64's digits (layoutDigits), "-" before them
// when negative, and 0 (never -0) for zero. So the number text 1, 1.0,
// 10E-1 and 0.1e1 all append 1; 9007199254740993 appends itself, not
// 9007199254740992; 1e-400 appends 1e-400, not 0. An exponent of any size
// is handled exactly (math/big past 18 digits). A number written by an
// RFC 8785 canonicalizer is already in this form, so it is its own. buf
// is scratch space where the integer and fraction digits are joined.
func appendExactNumber(dst, in, frac, exp []byte, neg bool, buf *[]byte) []byte {
	// The value is 0.ds × 10^n, ds the significant digits of in+frac.
	lead := 0
	for lead < len(in) && in[lead] == '0' {
		lead++
	}
	point := len(in) - lead // digits before the point, after the zeros
	for len(frac) > 0 && frac[len(frac)-1] == '0' {
		frac = frac[:len(frac)-1]
	}
	var ds []byte
	switch {
	case point > 0 && len(frac) == 0:
		ds = in[lead:]
	case point > 0:
		*buf = append(append((*buf)[:0], in[lead:]...), frac...)
		ds = *buf
	default:
		z := 0
		for z < len(frac) && frac[z] == '0' {
			z++
		}
		point = -z
		ds = frac[z:]
	}
	for len(ds) > 0 && ds[len(ds)-1] == '0' {
		ds = ds[:len(ds)-1]
	}
	if len(ds) == 0 {
		return append(dst, '0')
	}
	if neg {
		dst = append(dst, '-')
	}
	expNeg := len(exp) > 0 && exp[0] == '-'
	if len(exp) > 0 && (exp[0] == '-' || exp[0] == '+') {
		exp = exp[1:]
	}
	for len(exp) > 0 && exp[0] == '0' {
		exp = exp[1:]
	}
	if len(exp) > 18 { // beyond an int64, and so far beyond layoutDigits's ±21
		e, _ := new(big.Int).SetString(string(exp), 10) // digits, checked
		if expNeg {
			e.Neg(e)
		}
		e.Add(e, big.NewInt(int64(point)-1)) // the exponent of d.ddd
		dst = appendSignificand(dst, ds)
		if e.Sign() < 0 {
			return e.Append(append(dst, 'e'), 10)
		}
		return e.Append(append(dst, 'e', '+'), 10)
	}
	var e int64
	for _, b := range exp {
		e = e*10 + int64(b-'0')
	}
	if expNeg {
		e = -e
	}
	return layoutDigits(dst, ds, e+int64(point))
}

// digits skips a run of decimal digits and returns its length.
func (c *canonicalizer) digits() int {
	start := c.pos
	for c.pos < len(c.in) && '0' <= c.in[c.pos] && c.in[c.pos] <= '9' {
		c.pos++
	}
	return c.pos - start
}

// appendECMAScriptNumber appends the finite f as ECMAScript's
// Number.prototype.toString writes it (ECMA-262, Number::toString): the
// shortest digits that read back as f, without an exponent from 1e-6 up
// to 1e21 (exclusive), and with one ("1e+21", "1.5e-7") outside that.
func appendECMAScriptNumber(dst []byte, f float64) []byte {
	if f == 0 { // and -0
		return append(dst, '0')
	}
	if f < 0 {
		dst = append(dst, '-')
		f = -f
	}
	// Go's shortest round-trip digits, as d.ddde±XX: the digits are the
	// ones ECMAScript chooses; only their layout differs.
	var buf [32]byte
	e := strconv.AppendFloat(buf[:0], f, 'e', -1, 64)
	var digits [24]byte
	k := 0
	i := 0
	for ; e[i] != 'e'; i++ {
		if e[i] != '.' {
			digits[k] = e[i]
			k++
		}
	}
	exp := 0
	neg := e[i+1] == '-'
	for _, b := range e[i+2:] {
		exp = exp*10 + int(b-'0')
	}
	if neg {
		exp = -exp
	}
	// f = 0.d1d2...dk × 10^n in ECMAScript's terms.
	return layoutDigits(dst, digits[:k], int64(exp+1))
}

// layoutDigits appends the number 0.ds × 10^n (ds its significant digits,
// the first and the last not 0) as ECMAScript's Number::toString lays out
// its digits: without an exponent from 1e-6 up to 1e21 (exclusive), as
// d.ddd with one ("1e+21", "1.5e-7") outside that.
func layoutDigits(dst, ds []byte, n int64) []byte {
	k := int64(len(ds))
	switch {
	case k <= n && n <= 21:
		dst = append(dst, ds...)
		for range n - k {
			dst = append(dst, '0')
		}
	case 0 < n && n <= 21:
		dst = append(dst, ds[:n]...)
		dst = append(dst, '.')
		dst = append(dst, ds[n:]...)
	case -6 < n && n <= 0:
		dst = append(dst, '0', '.')
		for range -n {
			dst = append(dst, '0')
		}
		dst = append(dst, ds...)
	default:
		dst = appendSignificand(dst, ds)
		dst = append(dst, 'e')
		if n-1 < 0 {
			dst = append(dst, '-')
			dst = strconv.AppendInt(dst, 1-n, 10)
		} else {
			dst = append(dst, '+')
			dst = strconv.AppendInt(dst, n-1, 10)
		}
	}
	return dst
}

// appendSignificand appends the digits ds as d.ddd (d alone for one digit).
func appendSignificand(dst, ds []byte) []byte {
	dst = append(dst, ds[0])
	if len(ds) > 1 {
		dst = append(dst, '.')
		dst = append(dst, ds[1:]...)
	}
	return dst
}
