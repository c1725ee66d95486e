package main

import (
	"context"
	"fmt"
	"hash/fnv"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idemkit/idem"
)

const scope = "tenant-1 POST /orders"

// scheme sends request req (number n) and reports its outcome: how one way
// of recording the request (or none, for the bare write) sends the write.
type scheme func(ctx context.Context, req idem.Request, n int64) (idem.Outcome, error)

// op runs request i of a cell and reports the outcome (Won for the bare
// write and a 2xx from the middleware).
type op func(ctx context.Context, i int64) (idem.Outcome, error)

// cell is one measurement: one path at one level of concurrency, bounded by
// a duration and a count.
type cell struct {
	target  string
	path    path
	clients int
	round   int

	// ops counts the requests that succeeded; only they count for
	// throughput and latency. A cell with errors is excluded from the
	// tables, and reported.
	ops      int64
	errors   int64
	firstErr error
	outcomes [5]int64 // by idem.Outcome
	elapsed  time.Duration
	lat      []time.Duration // sorted
	wire     counts
	// clientCPU is the benchmark process's CPU time during the cell,
	// serverCPU the database container's (0 when unknown).
	clientCPU, serverCPU time.Duration
}

func (c *cell) throughput() float64 {
	if c.elapsed <= 0 {
		return 0
	}
	return float64(c.ops) / c.elapsed.Seconds()
}

func (c *cell) percentile(p float64) time.Duration {
	if len(c.lat) == 0 {
		return 0
	}
	i := int(float64(len(c.lat)-1) * p)
	return c.lat[i]
}

// measure runs fn from clients goroutines until dur has passed, maxOps
// requests were sent or stop (when not nil) is set. Requests in flight at
// the deadline finish and count; requests that fail are counted apart and
// not in throughput.
func measure(ctx context.Context, t *target, clients int, dur time.Duration, maxOps int64, fn op, stop *atomic.Bool) *cell {
	c := &cell{target: t.name, clients: clients}
	var (
		next     atomic.Int64
		mu       sync.Mutex
		wg       sync.WaitGroup
		errCount atomic.Int64
	)
	before := t.wire.snapshot()
	cpu0, srv0 := processCPU(), time.Duration(0)
	if t.serverCPU != nil {
		srv0 = t.serverCPU()
	}
	start := time.Now()
	deadline := start.Add(dur)
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lat := make([]time.Duration, 0, 1024)
			var outcomes [5]int64
			var firstErr error
			for ctx.Err() == nil && time.Now().Before(deadline) && (stop == nil || !stop.Load()) {
				i := next.Add(1) - 1
				if i >= maxOps {
					break
				}
				t0 := time.Now()
				out, err := fn(ctx, i)
				if err != nil {
					if ctx.Err() != nil {
						break // the run is ending: not the path's error
					}
					errCount.Add(1)
					if firstErr == nil {
						firstErr = err
					}
					continue
				}
				lat = append(lat, time.Since(t0))
				if out >= 0 && int(out) < len(outcomes) {
					outcomes[out]++
				}
			}
			mu.Lock()
			c.lat = append(c.lat, lat...)
			for i, n := range outcomes {
				c.outcomes[i] += n
			}
			if c.firstErr == nil {
				c.firstErr = firstErr
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	c.elapsed = time.Since(start)
	c.clientCPU = processCPU() - cpu0
	if t.serverCPU != nil {
		c.serverCPU = t.serverCPU() - srv0
	}
	c.wire = t.wire.snapshot().sub(before)
	c.ops = int64(len(c.lat))
	c.errors = errCount.Load()
	slices.Sort(c.lat)
	return c
}

// keySpace names the keys of one cell. Keys look like the UUIDs clients
// send: random (so they land all over the key index, not at one end of it)
// yet reproducible from the request number, so replays can send them again.
type keySpace struct {
	name string
	seed uint64
}

func newKeySpace(run string, p path, clients, round int) keySpace {
	name := fmt.Sprintf("%s-%s-%d-%d", run, p, clients, round)
	h := fnv.New64a()
	h.Write([]byte(name))
	return keySpace{name: name, seed: h.Sum64()}
}

func (k keySpace) key(i int64) string {
	a := splitmix64(k.seed ^ uint64(i))
	b := splitmix64(a ^ uint64(i)<<1)
	return fmt.Sprintf("%08x-%04x-4%03x-%04x-%012x", a>>32, a>>16&0xffff, a&0xfff, b>>48&0x3fff|0x8000, b&0xffffffffffff)
}

func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

func request(k keySpace, i int64, variant string) idem.Request {
	return idem.Request{Scope: scope, Key: k.key(i), Fingerprint: idem.FingerprintRequest(http.MethodPost, "/orders", requestBody(i, variant))}
}

// ops returns the request function of path d on target t: its scheme,
// given the keys of the cell (ks) and, for replays, the key space and count
// of the cell whose completed keys it sends again.
func ops(t *target, d pathDef, ks keySpace, done keySpace, doneN int64) op {
	send := t.schemes[d.scheme]
	if send == nil {
		panic(fmt.Sprintf("target %s has no scheme %q", t.name, d.scheme))
	}
	if d.of != "" {
		return func(ctx context.Context, i int64) (idem.Outcome, error) {
			j := i % max(doneN, 1)
			return send(ctx, request(done, j, ""), j)
		}
	}
	return func(ctx context.Context, i int64) (idem.Outcome, error) { return send(ctx, request(ks, i, ""), i) }
}
