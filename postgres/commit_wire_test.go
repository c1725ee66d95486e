package postgres

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemkit/idem/dialect"
)

// TestCommitAtShutdown: a server that shuts down while a COMMIT runs
// commits it and then ends the session (FATAL 57P01) behind the COMMIT's
// result, in the same answer; one whose signal came before the COMMIT ran
// ends the session without it, rolled back. Commit reports the first as
// committed and the second as a known failure (a retry may run the work),
// with the completion held for COMMIT and without.
func TestCommitAtShutdown(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, tc := range []struct {
		name      string
		held      bool
		terminate terminateAt
		committed bool
	}{
		{"completion held for COMMIT, ended after COMMIT", true, terminateAfterCommit, true},
		{"COMMIT alone, ended after COMMIT", false, terminateAfterCommit, true},
		{"completion held for COMMIT, ended before COMMIT", true, terminateBeforeCommit, false},
		{"COMMIT alone, ended before COMMIT", false, terminateBeforeCommit, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db, s := openFake(t, true)
			d, err := NewSQL(ctx, db, Options{})
			if err != nil {
				t.Fatal(err)
			}
			s.mu.Lock()
			s.terminate = tc.terminate
			s.mu.Unlock()
			tx, err := d.Begin(ctx, dialect.BeginOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if err := dialect.Pipeline(ctx, tx, dialect.Statement{SQL: "insert claim"}); err != nil {
				t.Fatal(err)
			}
			if tc.held && !dialect.DeferToCommit(tx, dialect.Statement{SQL: "update complete"}) {
				t.Fatal("DeferToCommit declined")
			}
			err = tx.Commit(ctx)
			if tc.committed {
				if err != nil {
					t.Errorf("Commit = %v, want nil: the server reported COMMIT done before it ended the session", err)
				}
				return
			}
			var pe *pgconn.PgError
			if !errors.As(err, &pe) || pe.Code != "57P01" || errors.Is(err, dialect.ErrCommitUnknown) {
				t.Errorf("Commit = %v, want the session's end (57P01) as a known failure", err)
			}
		})
	}
}
