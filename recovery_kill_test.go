package idem_test

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/sqlite"
)

// killConfig is the store of both processes of TestRecoveryAfterKill: the
// database's clock, a short lease.
func killConfig() idem.Config {
	return idem.Config{Lease: 3 * time.Second, WaitBound: 100 * time.Millisecond, HolderWaitBound: 500 * time.Millisecond}
}

// openKillStore opens the SQLite file at path with the store on it.
func openKillStore(t *testing.T, path string) (*sql.DB, *idem.Store[*sql.Tx]) {
	t.Helper()
	db, err := sqlite.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	d, err := sqlite.New(t.Context(), db, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	store, err := idem.New(d, killConfig())
	if err != nil {
		t.Fatal(err)
	}
	return db, store
}

// TestRecoveryAfterKill: a real holder process, killed with SIGKILL in
// the middle of its work. While it lives its heartbeat keeps the lease and
// the runner takes nothing; once it is killed the runner resumes the work
// from its recorded step, once.
func TestRecoveryAfterKill(t *testing.T) {
	if path := os.Getenv("IDEM_RECOVERY_CHILD"); path != "" {
		recoveryChild(t, path)
		return
	}
	path := t.TempDir() + "/idem.db"
	db, store := openKillStore(t, path)
	if err := store.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(t.Context(), `CREATE TABLE effects (k TEXT)`); err != nil {
		t.Fatal(err)
	}

	child := exec.Command(os.Args[0], "-test.run=^TestRecoveryAfterKill$")
	child.Env = append(os.Environ(), "IDEM_RECOVERY_CHILD="+path)
	out, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	child.Stderr = os.Stderr
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = child.Process.Kill(); _ = child.Wait() }()
	ready := make(chan bool, 1)
	go func() {
		lines := bufio.NewScanner(out)
		for lines.Scan() {
			if lines.Text() == "charged" {
				ready <- true
				return
			}
		}
		ready <- false
	}()
	select {
	case ok := <-ready:
		if !ok {
			t.Fatal("the holder process ended before its first step")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the holder process did not record its step within 30s")
	}

	var calls int
	r := idem.Recovery[*sql.Tx]{Interval: 50 * time.Millisecond, Jitter: -1,
		Operations: map[string]idem.LeaseFunc[*sql.Tx]{payOp: func(ctx context.Context, l *idem.Lease[*sql.Tx]) (idem.Response, error) {
			calls++
			name, data := l.Step()
			if name != "charged" {
				return idem.Response{}, errors.New("resumed before the charge")
			}
			err := l.RecordStep(ctx, "shipped", nil, func(ctx context.Context, tx *sql.Tx) error {
				_, err := tx.ExecContext(ctx, `INSERT INTO effects (k) VALUES ('shipped')`)
				return err
			})
			return idem.Response{Status: 201, Body: data}, err
		}}}
	// Alive past a whole lease: its heartbeat keeps the lease, nothing is
	// taken.
	time.Sleep(killConfig().Lease + time.Second)
	if rounds := runRounds(t, store, r, 2); rounds[0].Listed+rounds[1].Listed != 0 || calls != 0 {
		t.Fatalf("rounds %+v beside a live holder, want nothing listed", rounds)
	}

	if err := child.Process.Kill(); err != nil { // SIGKILL: no release, no heartbeat
		t.Fatal(err)
	}
	_ = child.Wait()
	deadline := time.Now().Add(30 * time.Second)
	for calls == 0 && time.Now().Before(deadline) {
		runRounds(t, store, r, 1)
	}
	if calls != 1 {
		t.Fatalf("recovery function ran %d times after the kill, want 1", calls)
	}
	rows := map[string]int{}
	q, err := db.QueryContext(t.Context(), `SELECT k, COUNT(*) FROM effects GROUP BY k`)
	if err != nil {
		t.Fatal(err)
	}
	for q.Next() {
		var k string
		var n int
		if err := q.Scan(&k, &n); err != nil {
			t.Fatal(err)
		}
		rows[k] = n
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	if rows["charged"] != 1 || rows["shipped"] != 1 {
		t.Fatalf("effects %v, want charged and shipped once each", rows)
	}
	res, err := store.Lease(t.Context(), payRequest("killed"))
	if err != nil || res.Outcome != idem.Replay || string(res.Response.Body) != "ch_killed" {
		t.Fatalf("retry: %+v, %v, want the recovered answer", res, err)
	}
}

// recoveryChild is the holder process: it charges (a row and the step),
// says so on stdout, then works on until killed, its heartbeat running.
func recoveryChild(t *testing.T, path string) {
	_, store := openKillStore(t, path)
	_, err := store.DoLease(t.Context(), payRequest("killed"), func(ctx context.Context, l *idem.Lease[*sql.Tx]) (idem.Response, error) {
		err := l.RecordStep(ctx, "charged", []byte("ch_killed"), func(ctx context.Context, tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, `INSERT INTO effects (k) VALUES ('charged')`)
			return err
		})
		if err != nil {
			return idem.Response{}, err
		}
		os.Stdout.WriteString("charged\n")
		select { // the rest of the work, until the parent kills this process
		case <-ctx.Done():
		case <-time.After(time.Minute):
		}
		return idem.Response{}, errors.New("not killed within a minute")
	})
	t.Fatalf("the holder was to be killed mid-work; DoLease returned %v", err)
}
