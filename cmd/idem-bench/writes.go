package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"time"
)

// writeCounts are a server's write counters at one moment, for the writes
// probe: what one request writes, over -writes requests sent one at a time.
type writeCounts struct {
	logBytes int64 // WAL or redo bytes
	pages    int64 // full-page images (PostgreSQL), page writes (InnoDB), WAL frames (SQLite)
	inserts  int64 // PostgreSQL: rows inserted into the tables asked for
	updates  int64 // PostgreSQL: rows updated in the idem table
	hot      int64 // PostgreSQL: of those, HOT updates
}

// writesResult is one probe: a path on a table of some size.
type writesResult struct {
	target  string
	path    path
	records int64 // records in the idem table before the probe
	n       int64
	d       writeCounts
	hotSeen bool // the HOT counts are known
}

// probeWrites sends n requests of send one at a time and reads the
// counters before and after. keys is the idem table, orders the user's.
func probeWrites(ctx context.Context, t *target, send scheme, p path, keys string, records, n int64, runID string) (*writesResult, error) {
	ks := newKeySpace(runID, p+"-writes", 1, int(records%1000))
	if t.writesReset != nil {
		if err := t.writesReset(ctx); err != nil {
			return nil, err
		}
		// SQLite: stay under the automatic checkpoint's 1,000 frames,
		// after which the WAL starts over.
		n = min(n, 100)
	}
	// Before: once the counters hold still for a second (PostgreSQL's
	// backends report at most once a second, so the earlier cells' counts
	// stay out). After: once they counted every insert and update the path
	// makes (the order; the record but on the bare write); others report
	// -1. A backend whose report was put off (10 s) can still come late.
	before, err := waitWrites(ctx, t, keys, time.Second, func(prev, c writeCounts) bool { return prev == c })
	if err != nil {
		return nil, err
	}
	want, wantUpdates := 2*n, n // the record's insert and update, the order
	if p == pathBare {
		want, wantUpdates = n, 0
	}
	for i := range n {
		if _, err := send(ctx, request(ks, i, ""), i); err != nil {
			return nil, fmt.Errorf("%s: request %d: %w", p, i, err)
		}
	}
	after, err := waitWrites(ctx, t, keys, 250*time.Millisecond, func(_, c writeCounts) bool {
		return c.inserts < 0 || c.inserts-before.inserts >= want && c.updates-before.updates >= wantUpdates
	})
	if err == nil && after.logBytes < before.logBytes {
		err = fmt.Errorf("%s: the log went back (%d to %d bytes): restarted during the probe", p, before.logBytes, after.logBytes)
	}
	d := writeCounts{after.logBytes - before.logBytes, after.pages - before.pages, after.inserts - before.inserts,
		after.updates - before.updates, after.hot - before.hot}
	logf("%s: writes of %s on %d records: %.0f log bytes, %.2f pages per request; %d updates, %d HOT",
		t.name, p, records, float64(d.logBytes)/float64(n), float64(d.pages)/float64(n), d.updates, d.hot)
	return &writesResult{t.name, p, records, n, d, before.inserts >= 0 && d.inserts >= want}, err
}

// waitWrites reads the counters every gap until done(previous, latest)
// holds, at most 15 s (then it logs and goes on).
func waitWrites(ctx context.Context, t *target, keys string, gap time.Duration, done func(prev, c writeCounts) bool) (writeCounts, error) {
	prev, err := t.writes(ctx, keys, t.orders)
	for deadline := time.Now().Add(15 * time.Second); err == nil; {
		if time.Now().After(deadline) {
			logf("%s: writes probe: the counters did not settle in 15 s", t.name)
			break
		}
		time.Sleep(gap)
		c, err := t.writes(ctx, keys, t.orders)
		if err != nil || done(prev, c) {
			return c, err
		}
		prev = c
	}
	return prev, err
}

// writesTest probes the bare write, the seed's SQL and Store.Do on the
// target's own tables.
func writesTest(ctx context.Context, o options, t *target, runID string) ([]*writesResult, error) {
	if t.writes == nil {
		return nil, nil
	}
	var out []*writesResult
	for _, p := range []path{pathBare, pathSeed, pathIdem} {
		d, _ := defOf(p)
		rows, err := t.size(ctx, t.keys)
		if err != nil {
			return out, err
		}
		res, err := probeWrites(ctx, t, t.schemes[d.scheme], p, t.keys, rows.rows, o.writesN, runID)
		if err != nil {
			return out, err
		}
		out = append(out, res)
	}
	return out, nil
}

// writeWrites reports the probes of the targets' own tables and of the
// scale test's sizes.
func (r *report) writeWrites(w io.Writer) {
	all := slices.Clone(r.writes)
	for _, s := range r.scale {
		if s.writes != nil {
			all = append(all, s.writes)
		}
	}
	if len(all) == 0 {
		return
	}
	fmt.Fprintf(w, "### Writes per request\n\n")
	fmt.Fprintf(w, "Requests sent one at a time, the server's counters read before and after. Log: PostgreSQL WAL bytes (LSN advance), InnoDB redo bytes (LSN advance), SQLite WAL bytes (frames × (page + 24)). Pages: PostgreSQL full-page images in the WAL, InnoDB buffer-pool write requests (page changes in memory; its flushes to disk come later), SQLite WAL frames (pages written). HOT: PostgreSQL's share of the idem table's updates made in place (pg_stat_user_tables). scale-N paths: Store.Do on the scale test's table of N records.\n\n")
	fmt.Fprintf(w, "| backend | path | records | requests | log B/req | pages/req | updates | HOT |\n|---|---|---:|---:|---:|---:|---:|---:|\n")
	for _, x := range all {
		hot := "—"
		if x.hotSeen && x.d.updates > 0 {
			hot = fmt.Sprintf("%.0f%%", 100*float64(x.d.hot)/float64(x.d.updates))
		}
		fmt.Fprintf(w, "| %s | %s | %d | %d | %.0f | %.2f | %d | %s |\n", x.target, x.path, x.records, x.n,
			float64(x.d.logBytes)/float64(x.n), float64(x.d.pages)/float64(x.n), x.d.updates, hot)
	}
	fmt.Fprintln(w)
}
