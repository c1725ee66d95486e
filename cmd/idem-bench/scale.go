package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"time"
)

// The scale test: claim latency on an idem table that already holds many
// records. For each size, a table of its own is bulk-loaded with completed,
// live records, the database settles, then claims of new keys are measured
// through Store.Do, and the table and its indexes are weighed.
//
// The loaded keys are spread evenly over the key space and loaded in key
// order, so the load appends to the index (fast, and bounded by
// -scale-timeout); the claims measured after it use random keys, which
// land between them. A table loaded in order is denser than one grown by
// random inserts (about 90 % full pages instead of about 70 %), so its size
// per record is a lower bound; the Storage table of the main run shows
// organic growth.

// scaleRow is one loaded record.
type scaleRow struct {
	scope, key       string
	fingerprint      [32]byte
	status           int
	header, body     []byte
	created, expires time.Time
}

// scaleHeader is the stored header of every loaded record.
var scaleHeader = encodeHeader(response(0).Header)

// nowForLoad is the clock a load's times are based on.
func nowForLoad() time.Time { return time.Now().UTC().Truncate(time.Microsecond) }

// fill makes row i of n: its key is the i-th of n keys spread evenly over
// the key space, in ascending order.
func (r *scaleRow) fill(i, n int64, now time.Time) {
	v := uint64(i) * (math.MaxUint64 / uint64(max(n, 1)))
	a := splitmix64(uint64(i) ^ 0x5ca1e)
	r.scope = scope
	r.key = fmt.Sprintf("%08x-%04x-%04x-%04x-%012x", v>>32, v>>16&0xffff, v&0xffff, a>>48, a&0xffffffffffff)
	for j := range 4 {
		a = splitmix64(a)
		binary.LittleEndian.PutUint64(r.fingerprint[8*j:], a)
	}
	r.status = 201
	r.header = scaleHeader
	r.body = fmt.Appendf(nil, `{"order":%d,"customer":%d,"item":%d,"status":"created"}`, i, customer, itemID)
	// Claimed in the last 12 hours, expiring in the next 12 to 24.
	r.created = now.Add(-time.Duration(a % uint64(12*time.Hour)))
	r.expires = now.Add(12*time.Hour + time.Duration(splitmix64(a)%uint64(12*time.Hour)))
}

// scaleResult is the claims on one table size.
type scaleResult struct {
	target  string
	want    int64 // records asked for
	loaded  int64 // records loaded (fewer when the load hit its bound)
	load    time.Duration
	loadErr error
	claims  *cell
	size    relSize
}

// scaleTest measures claims at each size of o.scaleRows.
func scaleTest(ctx context.Context, o options, t *target, runID string) ([]*scaleResult, error) {
	if t.bulkLoad == nil || t.storeOn == nil {
		return nil, fmt.Errorf("%s cannot bulk-load", t.name)
	}
	table := t.keys + "_scale"
	var out []*scaleResult
	for _, n := range o.scaleRows {
		if ctx.Err() != nil {
			return out, ctx.Err()
		}
		res := &scaleResult{target: t.name, want: n}
		if err := t.drop(ctx, table); err != nil {
			return out, err
		}
		send, err := t.storeOn(ctx, table)
		if err != nil {
			return out, err
		}
		logf("%s: loading %d records into %s", t.name, n, table)
		lctx, cancel := context.WithTimeout(ctx, o.scaleLimit)
		start := time.Now()
		next := time.Now().Add(30 * time.Second)
		res.loadErr = t.bulkLoad(lctx, table, n, func(done int64) {
			res.loaded = done
			if time.Now().After(next) {
				logf("%s: %d of %d loaded in %v", t.name, done, n, time.Since(start).Round(time.Second))
				next = time.Now().Add(30 * time.Second)
			}
		})
		cancel()
		res.load = time.Since(start)
		logf("%s: loaded %d records in %v (err %v)", t.name, res.loaded, res.load.Round(time.Millisecond), res.loadErr)
		if ctx.Err() != nil {
			return out, ctx.Err()
		}
		if err := t.settle(ctx, table); err != nil {
			return out, fmt.Errorf("settle: %w", err)
		}
		def := pathDef{name: path(fmt.Sprintf("scale-%d", n)), scheme: schemeIdem, keys: freshKeys}
		withStore := *t
		withStore.schemes = map[string]scheme{schemeIdem: send}
		measure(ctx, &withStore, o.scaleConc, o.warmup, o.maxOps, ops(&withStore, def, newKeySpace(runID, def.name+"-warm", o.scaleConc, 0), o.scaleConc, keySpace{}, 0))
		res.claims = measure(ctx, &withStore, o.scaleConc, o.scaleWindow, o.maxOps, ops(&withStore, def, newKeySpace(runID, def.name, o.scaleConc, 0), o.scaleConc, keySpace{}, 0))
		res.claims.path = def.name
		logf("%s: %d records: claims %8.0f/s p50 %.2fms p99 %.2fms errors %d", t.name, res.loaded, res.claims.throughput(),
			ms(res.claims.percentile(.5)), ms(res.claims.percentile(.99)), res.claims.errors)
		if sizes, err := t.sizes(ctx, table); err != nil {
			logf("%s: sizes: %v", t.name, err)
		} else if len(sizes) == 1 {
			res.size = sizes[0]
		}
		out = append(out, res)
		if err := t.drop(ctx, table); err != nil {
			return out, err
		}
	}
	return out, nil
}
