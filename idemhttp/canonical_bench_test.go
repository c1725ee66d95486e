package idemhttp_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
)

// orderBody is a JSON order of about size bytes as a client sends it: its
// properties not in sorted order, prices with decimals, some escapes.
func orderBody(size int) []byte {
	var b strings.Builder
	b.WriteString(`{"customer":{"name":"Zo\u00eb Example","email":"zoe@example.com","id":4711},"currency":"EUR","items":[`)
	for i := 0; ; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"sku":"SKU-%05d","qty":%d,"price":%d.%02d,"note":"gift\/wrap"}`, i, i%7+1, 10+i%90, i%100)
		if b.Len() >= size-40 {
			break
		}
	}
	b.WriteString(`],"total":1234.50,"express":false}`)
	return []byte(b.String())
}

// BenchmarkFingerprint compares DefaultFingerprint with
// CanonicalJSONFingerprint on JSON bodies of 200 B, 4 KiB and 256 KiB (the
// figures are in docs/http.md).
func BenchmarkFingerprint(b *testing.B) {
	r := httptest.NewRequest("POST", "/orders", nil)
	for _, size := range []struct {
		name string
		n    int
	}{{"200B", 200}, {"4KiB", 4 << 10}, {"256KiB", 256 << 10}} {
		body := orderBody(size.n)
		for _, fp := range []struct {
			name string
			fn   func(*http.Request, string, []byte) idem.Fingerprint
		}{{"default", idemhttp.DefaultFingerprint}, {"canonical", idemhttp.CanonicalJSONFingerprint}} {
			b.Run(fp.name+"/"+size.name, func(b *testing.B) {
				b.SetBytes(int64(len(body)))
				b.ReportAllocs()
				for b.Loop() {
					fp.fn(r, "/orders", body)
				}
			})
		}
	}
}
