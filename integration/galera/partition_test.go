package galera_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/integration/containers"
)

// A node cut off from the others (taken off the group network) leaves the
// primary component. On it every request must fail with a typed, retryable
// error, never a silent "not found" or a record only it has; a transaction
// that reaches COMMIT as the node is cut has an unknown outcome; a client
// spread over the nodes that retries what is retryable gets every request
// done exactly once; and the node, healed, has every record.
func TestPartition(t *testing.T) {
	f := newFixture(t, "partition", 4*time.Minute)
	c := f.cluster
	n3 := c.Nodes()[2]
	ctx := f.ctx

	// A completed record, known to n3 before the cut.
	before := request("before-cut")
	if _, err := f.store(f.nodes[0], idem.Config{}).Do(ctx, before, f.work(before.Key, "n1")); err != nil {
		t.Fatal(err)
	}
	if _, err := open(t, n3, "wsrep_sync_wait=1").ExecContext(ctx, "SELECT COUNT(*) FROM "+f.table); err != nil {
		t.Fatal(err)
	}

	cut := false
	t.Cleanup(func() {
		if cut {
			hctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := c.Heal(hctx, n3); err != nil {
				t.Errorf("heal n3 after a failed test: %v", err)
			}
		}
	})

	// A request on n3 whose function ends after n3 is cut: its COMMIT
	// cannot be replicated. The cluster may or may not have the write set,
	// so the outcome must be unknown, not a failure and not a success.
	onN3 := f.store(f.nodes[2], idem.Config{MaxAttempts: 3, CommitTimeout: 40 * time.Second})
	inflight := request("in-flight-at-cut")
	working, resume := make(chan struct{}), make(chan struct{})
	type outcome struct {
		res idem.Result
		err error
	}
	inflightDone := make(chan outcome, 1)
	go func() {
		res, err := onN3.Do(ctx, inflight, func(ctx context.Context, tx *sql.Tx) (idem.Response, error) {
			resp, err := f.work(inflight.Key, "n3")(ctx, tx)
			close(working)
			select {
			case <-resume:
			case <-time.After(30 * time.Second):
			}
			return resp, err
		})
		inflightDone <- outcome{res, err}
	}()
	select {
	case <-working:
	case <-time.After(30 * time.Second):
		t.Fatal("the request on n3 did not reach its function")
	}
	cutAt := time.Now()
	if err := c.Partition(ctx, n3); err != nil {
		t.Fatal(err)
	}
	cut = true
	close(resume)
	o := <-inflightDone
	t.Logf("COMMIT on n3 as it was cut: %v after %v", o.err, time.Since(cutAt).Round(time.Millisecond))
	if !errors.Is(o.err, idem.ErrCommitUnknown) || !idem.Retryable(o.err) {
		t.Errorf("COMMIT on n3 as it was cut: %+v, %v; want ErrCommitUnknown", o.res, o.err)
	}

	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	st, err := c.WaitFor(wctx, n3, "n3 out of the primary component", func(s containers.GaleraStatus) bool { return s.ClusterStatus != "Primary" })
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("n3 alone %v after the cut: %+v", time.Since(cutAt).Round(time.Millisecond), st)
	if _, err := c.WaitFor(wctx, c.Nodes()[0], "a primary component of n1 and n2", func(s containers.GaleraStatus) bool {
		return s.ClusterStatus == "Primary" && s.ClusterSize == 2
	}); err != nil {
		t.Fatal(err)
	}

	// On n3: typed, retryable errors, at once.
	lookupAt := time.Now()
	_, err = onN3.Lookup(ctx, before.Scope, before.Key)
	t.Logf("Lookup on n3: %v after %v", err, time.Since(lookupAt).Round(time.Millisecond))
	if !errors.Is(err, idem.ErrUnavailable) || !idem.Retryable(err) {
		t.Errorf("Lookup on n3 of a key it has: %v, want ErrUnavailable (never ErrNotFound)", err)
	}
	var ran atomic.Int32
	_, err = onN3.Do(ctx, request("on-cut-node"), func(ctx context.Context, tx *sql.Tx) (idem.Response, error) {
		ran.Add(1)
		return idem.Response{Status: 201}, nil
	})
	if !errors.Is(err, idem.ErrUnavailable) || !idem.Retryable(err) || ran.Load() != 0 {
		t.Errorf("Do on n3: %v (function ran %d times); want ErrUnavailable after Do's retries, the function never run", err, ran.Load())
	}

	// Through all three nodes, with a client that retries what Retryable
	// says is worth retrying: every request done once.
	sd := newSpread(f.nodes)
	spread := f.store(sd, idem.Config{})
	keys := []idem.Request{inflight}
	for i := range 30 {
		keys = append(keys, request(fmt.Sprintf("spread-%d", i)))
	}
	var mu sync.Mutex
	retried := map[string]int{}
	work := make(chan idem.Request)
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for req := range work {
				for attempt := 1; ; attempt++ {
					_, err := spread.Do(ctx, req, f.work(req.Key, "spread"))
					if err == nil {
						break
					}
					if !idem.Retryable(err) || attempt == 10 {
						t.Errorf("key %s: attempt %d: %v", req.Key, attempt, err)
						break
					}
					mu.Lock()
					retried[kind(err)]++
					mu.Unlock()
				}
			}
		})
	}
	for _, req := range keys {
		work <- req
	}
	close(work)
	wg.Wait()
	t.Logf("requests through all three nodes while n3 was cut: %d; transactions %s; client retries by cause %v", len(keys), sd.counts(), retried)
	if sd.begun[2].Load() == 0 || sd.failed[2].Load() != sd.begun[2].Load() {
		t.Errorf("transactions on n3 while it was cut: %s; want some, all failed", sd.counts())
	}

	healAt := time.Now()
	hctx, hcancel := context.WithTimeout(ctx, time.Minute)
	defer hcancel()
	if err := c.Heal(hctx, n3); err != nil {
		t.Fatal(err)
	}
	cut = false
	t.Logf("n3 back in the cluster and synced %v after the heal", time.Since(healAt).Round(time.Millisecond))
	for _, req := range append(keys, before) {
		if n := f.effectCount(req.Key); n != 1 {
			t.Errorf("key %s: %d effects, want exactly 1", req.Key, n)
		}
		rec, err := onN3.Lookup(ctx, req.Scope, req.Key)
		if err != nil || !rec.Completed {
			t.Errorf("key %s on the healed n3: %+v, %v", req.Key, rec, err)
		}
	}
}

// kind names the meaning a retryable error carries.
func kind(err error) string {
	for _, m := range []struct {
		name string
		err  error
	}{{"unavailable", idem.ErrUnavailable}, {"deadlock", idem.ErrDeadlock}, {"serialization", idem.ErrSerialization}, {"commit-unknown", idem.ErrCommitUnknown}} {
		if errors.Is(err, m.err) {
			return m.name
		}
	}
	return err.Error()
}
