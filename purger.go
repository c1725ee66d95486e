package idem

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/idemkit/idem/internal/backoff"
)

// Purger deletes expired records: *Store[TTx] is one. RunPurges drives it.
type Purger interface {
	Purge(ctx context.Context) (PurgeResult, error)
}

// DefaultPurgeInterval is how often RunPurges purges when
// PurgeSchedule.Interval is 0.
const DefaultPurgeInterval = 10 * time.Minute

// DefaultPurgeJitter is the PurgeSchedule.Jitter used when it is 0.
const DefaultPurgeJitter = 0.1

// PurgeSchedule says how often RunPurges purges and whom it tells.
type PurgeSchedule struct {
	// Interval is the pause between the end of one purge and the start of
	// the next, before jitter. Default: DefaultPurgeInterval.
	Interval time.Duration
	// Jitter spreads the pauses: each is Interval times a random factor in
	// [1-Jitter, 1+Jitter], and the first purge starts after a random
	// share of Jitter*Interval, so replicas started together do not purge
	// in step. In [0, 1); 0 means DefaultPurgeJitter, and a negative value
	// means none.
	Jitter float64
	// Report, when set, gets every run when it ends, on RunPurges'
	// goroutine (the next run waits for it).
	Report func(PurgeRun)
	// Logger, when set, logs a run that failed (warn) and each run's
	// result with the time of the next (debug). The store's own
	// Config.Logger logs every Purge's summary.
	Logger *slog.Logger
}

// PurgeRun is one purge RunPurges ran.
type PurgeRun struct {
	// Started is when the run began; Took how long it ran.
	Started time.Time
	Took    time.Duration
	// Result is what the purge deleted, even when it failed part way.
	Result PurgeResult
	// Err is why the run stopped early, if it did. The schedule goes on.
	Err error
}

// RunPurges purges p now (after a jittered start) and then again after
// every interval, until ctx ends; then it returns ctx's error. A run that
// fails is reported and the schedule goes on; the run in progress when ctx
// ends stops with it, and is reported too. It is safe to run in every
// replica of a service at once: a purge deletes only expired records,
// skips rows other transactions hold (on SQLite, purges take turns on the
// database's write lock), and each row is deleted by exactly one of them.
// It refuses, with ErrInvalidConfig, a negative interval or a jitter of 1
// or more.
func RunPurges(ctx context.Context, p Purger, s PurgeSchedule) error {
	switch {
	case p == nil:
		return fmt.Errorf("%w: nil Purger", ErrInvalidConfig)
	case s.Interval < 0:
		return fmt.Errorf("%w: purge interval %v is negative", ErrInvalidConfig, s.Interval)
	case s.Jitter >= 1:
		return fmt.Errorf("%w: purge jitter %v is not below 1", ErrInvalidConfig, s.Jitter)
	}
	if s.Interval == 0 {
		s.Interval = DefaultPurgeInterval
	}
	switch {
	case s.Jitter == 0:
		s.Jitter = DefaultPurgeJitter
	case s.Jitter < 0:
		s.Jitter = 0
	}
	pause := time.Duration(rand.Float64() * s.Jitter * float64(s.Interval))
	for {
		if err := backoff.Sleep(ctx, pause); err != nil {
			return err
		}
		run := PurgeRun{Started: time.Now()}
		run.Result, run.Err = p.Purge(ctx)
		run.Took = time.Since(run.Started)
		pause = time.Duration(float64(s.Interval) * (1 + s.Jitter*(2*rand.Float64()-1)))
		s.log(ctx, run, pause)
		if s.Report != nil {
			s.Report(run)
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
}

func (s PurgeSchedule) log(ctx context.Context, run PurgeRun, next time.Duration) {
	l := s.Logger
	if l == nil {
		return
	}
	level := slog.LevelDebug
	if run.Err != nil && ctx.Err() == nil {
		level = slog.LevelWarn
	}
	l.LogAttrs(ctx, level, "idem: scheduled purge",
		slog.Int64("deleted", run.Result.Deleted), slog.Int("batches", run.Result.Batches),
		slog.Duration("took", run.Took), slog.Duration("next_in", next), slog.Any("error", run.Err))
}
