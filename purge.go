package idem

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/idemkit/idem/dialect"
	"github.com/idemkit/idem/internal/backoff"
)

// PurgeResult reports what Purge deleted.
type PurgeResult struct {
	// Deleted is the number of expired records removed.
	Deleted int64
	// Batches is the number of purge transactions run.
	Batches int
}

// Purge deletes expired records in batches of Config.PurgeBatch, each in its
// own short READ COMMITTED transaction that skips rows other transactions
// hold, until a batch finds fewer than a full batch (nothing, on a backend
// whose batches may be partial: dialect.Capabilities) or ctx ends. Between
// batches it pauses so that it runs only Config.PurgeDutyCycle of the time.
// A batch that fails with an error a retry may cure is retried like Do's
// transactions. Run it periodically; bound it with ctx.
func (s *Store[TTx]) Purge(ctx context.Context) (res PurgeResult, err error) {
	if s.observing() {
		began := time.Now()
		defer func() {
			s.emit(ctx, Event{Kind: EventPurge, Rows: res.Deleted, Batches: res.Batches, Duration: time.Since(began), Err: err})
		}()
	}
	for {
		if err := ctx.Err(); err != nil {
			return res, fmt.Errorf("idem: purge: %w", err)
		}
		started := time.Now()
		n, err := s.purgeBatch(ctx)
		if err != nil {
			return res, fmt.Errorf("idem: purge batch %d on %s: %w", res.Batches+1, s.d.Name(), err)
		}
		res.Batches++
		res.Deleted += n
		if s.observing() {
			s.emit(ctx, Event{Kind: EventPurgeBatch, Rows: n, Batches: res.Batches, Duration: time.Since(started)})
		}
		if n == 0 || n < int64(s.cfg.PurgeBatch) && !s.d.Capabilities().PartialPurgeBatches {
			return res, nil
		}
		if d := s.cfg.PurgeDutyCycle; d < 1 {
			pause := time.Duration(float64(time.Since(started)) * (1 - d) / d)
			if err := backoff.Sleep(ctx, pause); err != nil {
				return res, fmt.Errorf("idem: purge: %w", err)
			}
		}
	}
}

// purgeBatch runs one batch in a transaction of its own.
func (s *Store[TTx]) purgeBatch(ctx context.Context) (int64, error) {
	var n int64
	err := s.retry(ctx, Request{}, func() error {
		tx, err := s.driver.Begin(ctx, dialect.BeginOptions{Isolation: sql.LevelReadCommitted, WaitBound: s.cfg.WaitBound})
		if err != nil {
			return s.d.Classify(err)
		}
		n, err = s.d.Purge(ctx, tx, s.table, dialect.PurgeArgs{Now: s.now(), Limit: s.cfg.PurgeBatch})
		if err != nil {
			rollback(ctx, tx)
			return s.d.Classify(err)
		}
		return s.d.Classify(tx.Commit(ctx))
	})
	return n, err
}
