package idem

import (
	"bytes"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/idemkit/idem/dialect"
)

// The core's own work on every request: hashing the request, encoding the
// response header for storage and decoding it on a replay. Run with
//
//	go test -run '^$' -bench . -benchmem .

// benchHeader is a typical JSON API response header.
var benchHeader = http.Header{
	"Content-Type":  {"application/json"},
	"Location":      {"/orders/123456"},
	"Cache-Control": {"no-store"},
	"X-Request-Id":  {"7f3c2a9e-1b4d-4e8f-9a6c-2d5e8f1a3b7c"},
}

func BenchmarkFingerprintRequest(b *testing.B) {
	for _, size := range []int{64, 1024, 64 << 10} {
		body := bytes.Repeat([]byte("x"), size)
		b.Run(byteSize(size), func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(size))
			for b.Loop() {
				FingerprintRequest(http.MethodPost, "/orders", body)
			}
		})
	}
}

func BenchmarkHasher(b *testing.B) {
	b.ReportAllocs()
	fields := [][]byte{[]byte("4711"), []byte("88"), []byte("2"), []byte("EUR")}
	for b.Loop() {
		var h Hasher
		h.AddString(http.MethodPost)
		h.AddString("/orders")
		for _, f := range fields {
			h.Add(f)
		}
		h.Sum()
	}
}

func BenchmarkEncodeHeader(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		encodeHeader(benchHeader)
	}
}

func BenchmarkDecodeHeader(b *testing.B) {
	enc := encodeHeader(benchHeader)
	b.ReportAllocs()
	b.SetBytes(int64(len(enc)))
	for b.Loop() {
		if _, err := decodeHeader(enc); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkReplayRecord is what a replay costs the core once the dialect
// has read the row: the stored record turned into a Result.
func BenchmarkReplayRecord(b *testing.B) {
	req := Request{Scope: "tenant-1 POST /orders", Key: "7f3c2a9e-1b4d-4e8f-9a6c-2d5e8f1a3b7c",
		Fingerprint: FingerprintRequest(http.MethodPost, "/orders", []byte(`{"customer":4711,"item":88}`))}
	rec := dialect.Record{
		Scope: req.Scope, Key: req.Key, Fingerprint: req.Fingerprint[:], State: dialect.Completed,
		Status: http.StatusCreated, Header: encodeHeader(benchHeader),
		Body:      []byte(`{"order":123456,"customer":4711,"item":88,"status":"created"}`),
		CreatedAt: time.Now(), ExpiresAt: time.Now().Add(DefaultRetention),
	}
	var c core
	b.ReportAllocs()
	for b.Loop() {
		res, err := c.judge(req, rec)
		if err != nil || res.Outcome != Replay {
			b.Fatal(res.Outcome, err)
		}
	}
}

func byteSize(n int) string {
	if n >= 1<<10 {
		return strconv.Itoa(n>>10) + "KiB"
	}
	return strconv.Itoa(n) + "B"
}
