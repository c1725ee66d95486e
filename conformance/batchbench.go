package conformance

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/idemkit/idem"
)

// BenchmarkPerKey compares what one key costs on store done one at a time
// (Do) and in batches of 1, 10 and 100 (DoBatch): every key new, claimed,
// completed and committed, with no effect of its own, so the figures are
// idem's cost per key. Each sub-benchmark reports ns/key. A backend's
// benchmark calls it with a migrated store:
//
//	func BenchmarkPerKey(b *testing.B) { conformance.BenchmarkPerKey(b, store) }
func BenchmarkPerKey[TTx any](b *testing.B, store *idem.Store[TTx]) {
	resp := idem.Response{Status: 201, Body: []byte(`{"id":123456}`)}
	fp := idem.FingerprintRequest("POST", "/orders", resp.Body)
	// A scope of its own per run, so that runs on one table (-count)
	// never meet each other's keys.
	scope := "bench " + strconv.FormatInt(time.Now().UnixNano(), 36)
	i := 0
	next := func() idem.Request {
		i++
		return idem.Request{Scope: scope, Key: "k" + strconv.Itoa(i), Fingerprint: fp}
	}
	b.Run("Do", func(b *testing.B) {
		do := func(context.Context, TTx) (idem.Response, error) { return resp, nil }
		for b.Loop() {
			if res, err := store.Do(b.Context(), next(), do); err != nil || res.Outcome != idem.Won {
				b.Fatalf("Do = %v, %v", res.Outcome, err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N), "ns/key")
	})
	for _, n := range []int{1, 10, 100} {
		b.Run("DoBatch/"+strconv.Itoa(n), func(b *testing.B) {
			reqs := make([]idem.Request, n)
			fn := func(_ context.Context, _ TTx, won []idem.Request) ([]idem.Response, error) {
				resps := make([]idem.Response, len(won))
				for j := range resps {
					resps[j] = resp
				}
				return resps, nil
			}
			for b.Loop() {
				for j := range reqs {
					reqs[j] = next()
				}
				res, err := store.DoBatch(b.Context(), reqs, fn)
				if err != nil || res[n-1].Outcome != idem.Won {
					b.Fatalf("DoBatch = %v, %v", res, err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/key")
		})
	}
}
