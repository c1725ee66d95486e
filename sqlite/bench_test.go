package sqlite_test

import (
	"context"
	"database/sql"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/conformance"
	"github.com/idemkit/idem/sqlite"
)

// The backend's statements on a file database, through the store: each
// iteration runs the lifecycle or lease statements a request needs, through
// the prepared-statement cache. Run with
//
//	go test -run '^$' -bench . -benchmem ./sqlite/

func benchStore(b *testing.B) *idem.Store[*sql.Tx] {
	b.Helper()
	db, err := sqlite.Open(filepath.Join(b.TempDir(), "idem.db"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { db.Close() })
	d, err := sqlite.New(b.Context(), db, sqlite.Options{})
	if err != nil {
		b.Fatal(err)
	}
	store, err := idem.New(d, idem.Config{Retention: time.Hour, Lease: time.Minute})
	if err != nil {
		b.Fatal(err)
	}
	if err := store.Migrate(b.Context()); err != nil {
		b.Fatal(err)
	}
	return store
}

var benchResponse = idem.Response{Status: 201, Body: []byte(`{"id":123456}`)}

func benchDo(_ context.Context, _ *sql.Tx) (idem.Response, error) { return benchResponse, nil }

// BenchmarkDo: a new key each time (claim, complete, commit).
func BenchmarkDo(b *testing.B) {
	store := benchStore(b)
	ctx := b.Context()
	fp := idem.FingerprintRequest("POST", "/orders", benchResponse.Body)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		res, err := store.Do(ctx, idem.Request{Scope: "bench", Key: "k" + strconv.Itoa(i), Fingerprint: fp}, benchDo)
		if err != nil || res.Outcome != idem.Won {
			b.Fatalf("Do = %v, %v", res.Outcome, err)
		}
	}
}

// BenchmarkDoReplay: the same key again (claim lost, read).
func BenchmarkDoReplay(b *testing.B) {
	store := benchStore(b)
	ctx := b.Context()
	req := idem.Request{Scope: "bench", Key: "k", Fingerprint: idem.FingerprintRequest("POST", "/orders", benchResponse.Body)}
	if _, err := store.Do(ctx, req, benchDo); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		res, err := store.Do(ctx, req, benchDo)
		if err != nil || res.Outcome != idem.Replay {
			b.Fatalf("Do = %v, %v", res.Outcome, err)
		}
	}
}

// BenchmarkLookup: a read on the pool.
func BenchmarkLookup(b *testing.B) {
	store := benchStore(b)
	ctx := b.Context()
	req := idem.Request{Scope: "bench", Key: "k", Fingerprint: idem.FingerprintRequest("POST", "/orders", benchResponse.Body)}
	if _, err := store.Do(ctx, req, benchDo); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := store.Lookup(ctx, req.Scope, req.Key); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDoLease: a new key each time in lease mode (insert, extend,
// step, complete).
func BenchmarkDoLease(b *testing.B) {
	store := benchStore(b)
	ctx := b.Context()
	fp := idem.FingerprintRequest("POST", "/orders", benchResponse.Body)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		res, err := store.DoLease(ctx, idem.Request{Scope: "bench", Key: "k" + strconv.Itoa(i), Fingerprint: fp},
			func(ctx context.Context, l *idem.Lease[*sql.Tx]) (idem.Response, error) {
				if err := l.Extend(ctx); err != nil {
					return idem.Response{}, err
				}
				if err := l.RecordStep(ctx, "charged", []byte("ch_1"), nil); err != nil {
					return idem.Response{}, err
				}
				return benchResponse, nil
			})
		if err != nil || res.Outcome != idem.Won {
			b.Fatalf("DoLease = %v, %v", res.Outcome, err)
		}
	}
}

// BenchmarkPerKey: a key done one at a time (Do) against keys done in
// batches of 1, 10 and 100 (DoBatch); compare ns/key.
func BenchmarkPerKey(b *testing.B) { conformance.BenchmarkPerKey(b, benchStore(b)) }
