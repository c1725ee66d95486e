package pgbouncer_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/integration/containers"
)

// Bounds of TestClaimFailsMidPipeline.
const (
	pipelineLanes  = 4  // losers at once, each on a connection of its own
	pipelineRounds = 25 // per lane
)

// TestClaimFailsMidPipeline: the pgx Driver sends BEGIN and the claim in
// one pipeline, and the completion with COMMIT. A claim that meets a held
// key waits out its bound and fails inside the pipeline (55P03 after
// BEGIN); PgBouncer must hand the rest of that exchange, and the next
// request on the same client connection, to the right server connection
// (its issue 759 is a race between a pipeline's error and the messages
// that follow it). In every mode a supported combination uses, each lane
// repeats: a winner holds a key; the loser's Do answers InFlight; the same
// connection at once does another key's work; the winner completes; the
// loser's retry replays the winner's answer byte for byte.
func TestClaimFailsMidPipeline(t *testing.T) {
	set := containers.PgBouncers(t)
	for _, tc := range []struct {
		name     string
		bouncer  *containers.PgBouncer
		settings string
	}{
		{"1.26/cache-statement", set.New, ""},
		{"1.18/exec", set.Old, "&default_query_exec_mode=exec"},
		{"1.18/simple-protocol", set.Old, "&default_query_exec_mode=simple_protocol"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dsn := tc.bouncer.DSN + tc.settings
			table := fmt.Sprintf("idem_pipeline_%d", time.Now().UnixNano())
			winners, winnerPool := newStore(t, set.Server, dsn, table, pipelineLanes, idem.Config{})
			var wg sync.WaitGroup
			for lane := range pipelineLanes {
				// The loser's claim gives up after 100 ms, inside its pipeline.
				loser, _ := newStore(t, set.Server, dsn, table, 1, idem.Config{WaitBound: 100 * time.Millisecond})
				wg.Go(func() {
					for round := range pipelineRounds {
						if err := pipelineRound(t.Context(), winners, winnerPool, loser, fmt.Sprintf("lane%d-round%d", lane, round)); err != nil {
							t.Errorf("lane %d, round %d: %v", lane, round, err)
							return
						}
					}
				})
			}
			wg.Wait()
		})
	}
}

// pipelineRound is one round of TestClaimFailsMidPipeline.
func pipelineRound(ctx context.Context, winners *idem.Store[pgx.Tx], winnerPool *pgxpool.Pool, loser *idem.Store[pgx.Tx], key string) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	tx, err := winnerPool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("winner's BEGIN: %w", err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	c, err := winners.Claim(ctx, tx, req(key))
	if err != nil || c.Outcome != idem.Won {
		return fmt.Errorf("winner's claim: %v, %v", c, err)
	}

	res, err := loser.Do(ctx, req(key), answer("the loser's"))
	if err != nil || res.Outcome != idem.InFlight {
		return fmt.Errorf("loser while the winner holds the key: %v, %v; want in-flight", res.Outcome, err)
	}
	other := key + "-other"
	res, err = loser.Do(ctx, req(other), answer(other))
	if err != nil || !res.Committed || string(res.Response.Body) != other {
		return fmt.Errorf("the loser's connection right after the failed pipeline: %v %q, %v; want %q done", res.Outcome, res.Response.Body, err, other)
	}

	want := idem.Response{Status: 201, Body: []byte("the winner's answer to " + key)}
	if err := c.Complete(ctx, want); err != nil {
		return fmt.Errorf("winner's completion: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("winner's COMMIT: %w", err)
	}
	res, err = loser.Do(ctx, req(key), answer("the loser's"))
	if err != nil || res.Outcome != idem.Replay || res.Response.Status != want.Status || string(res.Response.Body) != string(want.Body) {
		return fmt.Errorf("loser's retry: %v %d %q, %v; want a replay of %d %q", res.Outcome, res.Response.Status, res.Response.Body, err, want.Status, want.Body)
	}
	return nil
}
