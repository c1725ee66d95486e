package postgres

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemkit/idem/dialect"
)

// fakeTx is one of idem's transactions on a fakeServer, the claim sent.
type fakeTx struct {
	q      dialect.Queryer
	commit func(context.Context) error
	// end ends the transaction the way a caller's function could.
	end func(context.Context) error
}

// beginOnFake begins a transaction on a new fakeServer: on a *pgx.Conn as
// the pgx Driver does ("pgx"), or through NewSQL on a *sql.DB with
// HoldBegin ("HoldBegin") or without ("database/sql").
func beginOnFake(ctx context.Context, t *testing.T, via string, terminate terminateAt) fakeTx {
	t.Helper()
	var ft fakeTx
	if via == "pgx" {
		conn, err := pgx.ConnectConfig(ctx, fakeConfig(t, &fakeServer{terminate: terminate}))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = conn.Close(context.Background()) })
		tx := &pgxTx{ctx: ctx, conn: conn}
		ft = fakeTx{q: tx, commit: tx.Commit, end: func(ctx context.Context) error { return tx.Native().Rollback(ctx) }}
	} else {
		db, s := openFake(t, via == "HoldBegin")
		s.mu.Lock()
		s.terminate = terminate
		s.mu.Unlock()
		d, err := NewSQL(ctx, db, Options{})
		if err != nil {
			t.Fatal(err)
		}
		tx, err := d.Begin(ctx, dialect.BeginOptions{})
		if err != nil {
			t.Fatal(err)
		}
		ft = fakeTx{q: tx, commit: tx.Commit, end: func(ctx context.Context) error {
			_, err := tx.Native().ExecContext(ctx, "rollback")
			return err
		}}
	}
	if err := dialect.Pipeline(ctx, ft.q, dialect.Statement{SQL: "insert claim"}); err != nil {
		t.Fatal(err)
	}
	return ft
}

type commitOutcome uint8

const (
	committed commitOutcome = iota
	knownFailure
	outcomeUnknown
)

// TestCommitAtShutdown: a server that shuts down while a COMMIT runs
// commits it and ends the session (FATAL 57P01) right behind COMMIT's
// result; one whose signal came before the COMMIT ran ends it without
// that result, rolled back. Where the transaction sees COMMIT's result (a
// pgx transaction: the Driver's, HoldBegin's), the first is a commit and
// the second a known failure; through database/sql, which hides it, both
// are unknown. With the completion held for COMMIT and without. The fake
// speaks the simple protocol, so a pipeline is one query of several
// statements; the pgx Driver's extended-protocol pipeline (one Sync after
// COMMIT) is the Restarts case's, on a real server.
func TestCommitAtShutdown(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, tc := range []struct {
		via       string
		held      bool
		terminate terminateAt
		want      commitOutcome
	}{
		{"pgx", true, terminateAfterCommit, committed},
		{"pgx", false, terminateAfterCommit, committed},
		{"pgx", true, terminateBeforeCommit, knownFailure},
		{"pgx", false, terminateBeforeCommit, knownFailure},
		{"HoldBegin", true, terminateAfterCommit, committed},
		{"HoldBegin", false, terminateAfterCommit, committed},
		{"HoldBegin", true, terminateBeforeCommit, knownFailure},
		{"HoldBegin", false, terminateBeforeCommit, knownFailure},
		{"database/sql", false, terminateAfterCommit, outcomeUnknown},
		{"database/sql", false, terminateBeforeCommit, outcomeUnknown},
	} {
		name := map[terminateAt]string{terminateAfterCommit: "ended after COMMIT", terminateBeforeCommit: "ended before COMMIT"}[tc.terminate]
		if tc.held {
			name = tc.via + ", completion held for COMMIT, " + name
		} else {
			name = tc.via + ", COMMIT alone, " + name
		}
		t.Run(name, func(t *testing.T) {
			tx := beginOnFake(ctx, t, tc.via, tc.terminate)
			if tc.held && !dialect.DeferToCommit(tx.q, dialect.Statement{SQL: "update complete"}) {
				t.Fatal("DeferToCommit declined")
			}
			err := tx.commit(ctx)
			var pe *pgconn.PgError
			switch tc.want {
			case committed:
				if err != nil {
					t.Errorf("Commit = %v, want nil: the server reported COMMIT done before it ended the session", err)
				}
			case knownFailure:
				if !errors.As(err, &pe) || pe.Code != "57P01" || errors.Is(err, dialect.ErrCommitUnknown) {
					t.Errorf("Commit = %v, want the session's end (57P01) as a known failure", err)
				}
			case outcomeUnknown:
				if !errors.As(err, &pe) || pe.Code != "57P01" || !errors.Is(err, dialect.ErrCommitUnknown) {
					t.Errorf("Commit = %v, want the session's end (57P01) with ErrCommitUnknown", err)
				}
			}
		})
	}
}

// TestCommitAfterTheCallerEnded: when the caller's function ended the
// transaction itself, Commit sends no COMMIT (it would commit nothing and
// answer COMMIT) and reports ErrTxDone, with the completion held for
// COMMIT and without.
func TestCommitAfterTheCallerEnded(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, via := range []string{"pgx", "HoldBegin"} {
		for _, held := range []bool{false, true} {
			t.Run(map[bool]string{false: via + ", COMMIT alone", true: via + ", completion held for COMMIT"}[held], func(t *testing.T) {
				tx := beginOnFake(ctx, t, via, terminateNever)
				if err := tx.end(ctx); err != nil {
					t.Fatal(err)
				}
				if held && !dialect.DeferToCommit(tx.q, dialect.Statement{SQL: "update complete"}) {
					t.Fatal("DeferToCommit declined")
				}
				if err := tx.commit(ctx); !errors.Is(err, dialect.ErrTxDone) {
					t.Errorf("Commit = %v, want ErrTxDone", err)
				}
			})
		}
	}
}
