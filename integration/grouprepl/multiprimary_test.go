package grouprepl_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/integration/containers"
)

// causes counts Do's retries by cause, and those at COMMIT where the group
// refused the transaction: certification (3101) or the engine's rollback
// of a local transaction a remote one met first (1180 naming error 149).
type causes struct {
	mu      sync.Mutex
	byCause map[string]int
	cert    atomic.Int64
}

func (c *causes) Observe(_ context.Context, e idem.Event) {
	if e.Kind != idem.EventRetry {
		return
	}
	c.mu.Lock()
	c.byCause[e.Cause]++
	c.mu.Unlock()
	if e.Err != nil && (strings.Contains(e.Err.Error(), "3101") || strings.Contains(e.Err.Error(), "Got error 149 ")) {
		c.cert.Add(1)
	}
}

// TestMultiPrimary runs on a multi-primary group: every member takes
// writes, and a transaction meets the others' at certification.
func TestMultiPrimary(t *testing.T) {
	g := containers.StartGroupReplication(t, containers.GroupOptions{MultiPrimary: true})
	dbs := make([]*sql.DB, len(g.Members))
	for i, m := range g.Members {
		dbs[i] = openDB(t, m.DSN, 8)
	}
	if _, err := dbs[0].ExecContext(t.Context(), "CREATE TABLE race_effects (id BIGINT AUTO_INCREMENT PRIMARY KEY, k VARCHAR(64) NOT NULL, member VARCHAR(8) NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	t.Run("one key raced on two members", func(t *testing.T) { raceOnTwoMembers(t, g, dbs) })
	t.Run("member cut from the majority at COMMIT", func(t *testing.T) { cutAtCommit(t, g, dbs) })
}

// raceOnTwoMembers: two requests with one key on two members at once.
// Both claims win locally (neither member sees the other's uncommitted
// row), both functions run and wait for each other, both transactions
// reach COMMIT together. Certification lets the first write set ordered
// commit and refuses the other with 3101 (ErrSerialization); Do retries
// it, and the retry replays the winner's answer: one effect per key.
func raceOnTwoMembers(t *testing.T, g *containers.GroupReplication, dbs []*sql.DB) {
	obs := &causes{byCause: map[string]int{}}
	stores := make([]*idem.Store[*sql.Tx], len(dbs))
	for i, db := range dbs {
		// A loser's retry replays once the winner's write set is applied
		// on its member; until then it may conflict again.
		cfg := idem.Config{Table: "idem_race", MaxAttempts: 10, Observer: obs}
		if i == 0 {
			stores[i] = newStore(t, db, cfg)
			continue
		}
		stores[i] = openStore(t, db, cfg)
		migrated(t, stores[i])
	}
	const keys = 8
	for k := range keys {
		key := fmt.Sprintf("race-%d", k)
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		var arrived sync.WaitGroup
		arrived.Add(2)
		var once [2]sync.Once
		var results [2]idem.Result
		var errs [2]error
		var wg sync.WaitGroup
		for i := range 2 {
			member := (k + i) % len(dbs)
			name := g.Members[member].Name
			wg.Go(func() {
				results[i], errs[i] = stores[member].Do(ctx, req(key), func(ctx context.Context, tx *sql.Tx) (idem.Response, error) {
					if _, err := tx.ExecContext(ctx, "INSERT INTO race_effects (k, member) VALUES (?, ?)", key, name); err != nil {
						return idem.Response{}, err
					}
					// The first run of each side waits (boundedly) for
					// the other's: both hold a local win of the key.
					once[i].Do(func() {
						arrived.Done()
						waitGroup(ctx, &arrived, 10*time.Second)
					})
					return idem.Response{Status: 201, Body: []byte(key + " by " + name)}, nil
				})
			})
		}
		wg.Wait()
		cancel()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("key %s: Do %d: %v", key, i, err)
			}
		}
		won, replay := results[0], results[1]
		if won.Outcome != idem.Won {
			won, replay = replay, won
		}
		if won.Outcome != idem.Won || !won.Committed || replay.Outcome != idem.Replay || string(replay.Response.Body) != string(won.Response.Body) {
			t.Fatalf("key %s: %v %q and %v %q; want one won and committed, the other a replay of it", key,
				results[0].Outcome, results[0].Response.Body, results[1].Outcome, results[1].Response.Body)
		}
	}
	// A member applies the others' commits a moment after certification
	// (group_replication_consistency EVENTUAL): the count waits until n1
	// has applied everything the group committed before it (BEFORE).
	conn, err := dbs[0].Conn(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.ExecContext(t.Context(), "SET SESSION group_replication_consistency = 'BEFORE'"); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := conn.QueryRowContext(t.Context(), "SELECT COUNT(*) FROM race_effects WHERE k LIKE 'race-%'").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.ExecContext(t.Context(), "SET SESSION group_replication_consistency = DEFAULT"); err != nil {
		t.Fatal(err)
	}
	if n != keys {
		t.Errorf("%d effects for %d keys, want one each", n, keys)
	}
	obs.mu.Lock()
	defer obs.mu.Unlock()
	t.Logf("%d keys raced: Do's retries by cause %v, %d of them after a 3101 or a 1180 (error 149) at COMMIT", keys, obs.byCause, obs.cert.Load())
	if obs.cert.Load() == 0 {
		t.Errorf("no COMMIT was refused (3101, or 1180 with error 149): the race did not happen")
	}
}

// waitGroup waits for wg within d or ctx.
func waitGroup(ctx context.Context, wg *sync.WaitGroup, d time.Duration) {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// cutAtCommit: a member taken off the group network while a transaction
// of it waits for certification fails that COMMIT with 3100 once the
// unreachable-majority timeout (5 s) passes. The write set may or may not
// have reached the majority, so Do reports ErrCommitUnknown; the next call
// of the key, on another member, replays it or does the work once.
func cutAtCommit(t *testing.T, g *containers.GroupReplication, dbs []*sql.DB) {
	cut := len(dbs) - 1
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	other := newStore(t, dbs[0], idem.Config{Table: "idem_cut"})
	s := openStore(t, dbs[cut], idem.Config{Table: "idem_cut", CommitTimeout: 30 * time.Second})
	migrated(t, s)
	key := "cut-at-commit"
	work := func(name string) idem.Func[*sql.Tx] {
		return func(ctx context.Context, tx *sql.Tx) (idem.Response, error) {
			if _, err := tx.ExecContext(ctx, "INSERT INTO race_effects (k, member) VALUES (?, ?)", key, name); err != nil {
				return idem.Response{}, err
			}
			if name == g.Members[cut].Name {
				// Cut the member while its transaction is open: its
				// COMMIT then waits for a majority it cannot reach.
				if err := g.Partition(ctx, g.Members[cut]); err != nil {
					return idem.Response{}, err
				}
			}
			return idem.Response{Status: 201, Body: []byte(key + " by " + name)}, nil
		}
	}
	begin := time.Now()
	_, err := s.Do(ctx, req(key), work(g.Members[cut].Name))
	took := time.Since(begin)
	if !errors.Is(err, idem.ErrCommitUnknown) {
		t.Fatalf("Do on the member cut at COMMIT: %v after %v; want ErrCommitUnknown (3100)", err, took.Round(time.Millisecond))
	}
	t.Logf("Do on the member cut at COMMIT: %v after %v", err, took.Round(time.Millisecond))
	res, err := other.Do(ctx, req(key), work(g.Members[0].Name))
	if err != nil || (res.Outcome != idem.Replay && !res.Committed) {
		t.Fatalf("the next call, on %s: %v, %v; want a replay or the work done", g.Members[0].Name, res.Outcome, err)
	}
	var n int
	if err := dbs[0].QueryRowContext(ctx, "SELECT COUNT(*) FROM race_effects WHERE k = ?", key).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Errorf("%d effects of %s, want exactly one", n, key)
	}
	t.Logf("the next call, on %s: %v", g.Members[0].Name, res.Outcome)
}

func req(key string) idem.Request {
	return idem.Request{Scope: "t POST /orders", Key: key, Fingerprint: idem.FingerprintRequest("POST", "/orders", []byte(key))}
}
