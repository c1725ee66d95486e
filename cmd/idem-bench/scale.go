package main

import (
	"context"
	"fmt"
	"time"
)

// The scale test: claim latency on an idem table that already holds many
// records. For each size, a table of its own is loaded on the server
// (target.fill) with completed, live records, the database settles, then
// claims of new keys are measured through Store.Do, and the table and its
// indexes are weighed.
//
// The loaded keys are spread evenly over the key space and loaded in key
// order, so the load appends to the index (fast, and bounded by
// -scale-timeout); the claims measured after it use random keys, which
// land between them. A table loaded in order is denser than one grown by
// random inserts (about 90 % full pages instead of about 70 %), so its size
// per record is a lower bound.

// scaleResult is the claims on one table size.
type scaleResult struct {
	target  string
	want    int64 // records asked for
	loaded  int64 // records loaded (fewer when the load hit its bound)
	load    time.Duration
	loadErr error
	claims  *cell
	size    relSize
	writes  *writesResult
}

// scaleTest measures claims at each size of o.scaleRows.
func scaleTest(ctx context.Context, o options, t *target, runID string) ([]*scaleResult, error) {
	if t.fillSQL == "" || t.storeOn == nil {
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
		res.loadErr = t.fill(lctx, table, scope, n, true, func(done int64) {
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
		def := pathDef{name: path(fmt.Sprintf("scale-%d", n)), scheme: schemeIdem}
		withStore := *t
		withStore.schemes = map[string]scheme{schemeIdem: send}
		measure(ctx, &withStore, o.scaleConc, o.warmup, o.maxOps, ops(&withStore, def, newKeySpace(runID, def.name+"-warm", o.scaleConc, 0), keySpace{}, 0), nil)
		res.claims = measure(ctx, &withStore, o.scaleConc, o.scaleWindow, o.maxOps, ops(&withStore, def, newKeySpace(runID, def.name, o.scaleConc, 0), keySpace{}, 0), nil)
		res.claims.path = def.name
		logf("%s: %d records: claims %8.0f/s p50 %.2fms p99 %.2fms errors %d", t.name, res.loaded, res.claims.throughput(),
			ms(res.claims.percentile(.5)), ms(res.claims.percentile(.99)), res.claims.errors)
		if res.size, err = t.size(ctx, table); err != nil {
			logf("%s: size: %v", t.name, err)
		}
		if o.writesN > 0 && t.writes != nil {
			if res.writes, err = probeWrites(ctx, &withStore, send, def.name, table, res.size.rows, o.writesN, runID); err != nil {
				logf("%s: writes probe: %v", t.name, err)
			}
		}
		out = append(out, res)
		if err := t.drop(ctx, table); err != nil {
			return out, err
		}
	}
	return out, nil
}
