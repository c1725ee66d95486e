package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/idemkit/idem"
)

var purgeCommand = command{
	name:    "purge",
	summary: "delete expired records, showing progress",
	usage: `purge -dsn DSN [-table NAME] [-batch N] [-duty D] [-progress D] [-estimate=false] [-json]

Deletes every expired record (Store.Purge): in batches, each its own short
transaction that skips rows other transactions hold, pausing between batches
so that it runs only -duty of the time and claims keep their latency. Safe to
run while the service runs, and from several places at once. Progress goes to
stderr every -progress: on a terminal one line redrawn in place (rows deleted,
rate, and the time left, estimated from a count of the expired records taken
first), elsewhere a plain line each time. Ctrl-C stops it after the batch in
progress (exit 130). Runs until done unless -timeout is set.`,
	needsDB: true,
	timeout: 0,
	flags: func(fs *flag.FlagSet, e *env) func(context.Context, *env) error {
		batch := fs.Int("batch", idem.DefaultPurgeBatch, "records deleted per batch (transaction)")
		duty := fs.Float64("duty", idem.DefaultPurgeDutyCycle, "share of the time spent deleting, in (0, 1]; 1 runs batches back to back")
		every := fs.Duration("progress", time.Second, "how often to report progress on stderr (0: never)")
		estimate := fs.Bool("estimate", true, "count the expired records first, for the share done and the time left (a scan of the table)")
		p := &progress{}
		e.configure = func(cfg *idem.Config) {
			cfg.PurgeBatch, cfg.PurgeDutyCycle = *batch, *duty
			cfg.Observer = p
		}
		return func(ctx context.Context, e *env) error {
			s := e.target.store
			*p = progress{w: e.stderr, terminal: e.isTerminal, every: *every, total: -1}
			if *estimate && *every > 0 {
				c, err := s.Counts(ctx, "")
				if err != nil {
					return err
				}
				p.total = c.Expired
			}
			p.start = time.Now()
			res, err := s.Purge(ctx)
			p.finish()
			took := time.Since(p.start)
			if err != nil {
				if res.Deleted > 0 {
					fmt.Fprintf(e.stderr, "idem purge: stopped after deleting %s records\n", count(res.Deleted))
				}
				return err
			}
			if e.json {
				return writeJSON(e.stdout, map[string]any{
					"table": s.Config().Table, "deleted": res.Deleted, "batches": res.Batches,
					"seconds": took.Seconds(), "rows_per_second": rate(res.Deleted, took),
				})
			}
			fmt.Fprintf(e.stdout, "purged %s expired records from %s in %d batches, %s (%s rows/s)\n",
				count(res.Deleted), s.Config().Table, res.Batches, age(took), count(int64(rate(res.Deleted, took))))
			return nil
		}
	},
}

func rate(n int64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

// progress is the Observer that reports a purge's batches.
type progress struct {
	w        io.Writer
	terminal bool
	every    time.Duration
	// total is the expired records counted before the purge; -1 unknown.
	total   int64
	start   time.Time
	deleted int64
	last    time.Time
	drawn   bool // a terminal line is drawn and not yet ended
}

// Observe counts the rows of each batch and reports at most once per
// interval.
func (p *progress) Observe(_ context.Context, ev idem.Event) {
	if ev.Kind != idem.EventPurgeBatch || p.w == nil {
		return
	}
	p.deleted += ev.Rows
	if p.every <= 0 || time.Since(p.last) < p.every {
		return
	}
	p.last = time.Now()
	p.report()
}

func (p *progress) report() {
	elapsed := time.Since(p.start)
	r := rate(p.deleted, elapsed)
	line := "purge: " + count(p.deleted)
	if p.total >= 0 {
		line += " of ~" + count(max(p.total, p.deleted)) + " deleted"
		if p.total > 0 {
			line += fmt.Sprintf(" (%.0f%%)", 100*float64(min(p.deleted, p.total))/float64(p.total))
		}
	} else {
		line += " deleted"
	}
	line += ", " + count(int64(r)) + " rows/s"
	if p.total > p.deleted && r > 0 {
		line += ", ETA " + age(time.Duration(float64(p.total-p.deleted)/r*float64(time.Second)))
	}
	if p.terminal {
		fmt.Fprintf(p.w, "\r%s\x1b[K", line)
		p.drawn = true
		return
	}
	fmt.Fprintln(p.w, line)
}

// finish ends a line drawn on a terminal.
func (p *progress) finish() {
	if p.drawn {
		fmt.Fprintln(p.w)
	}
}
