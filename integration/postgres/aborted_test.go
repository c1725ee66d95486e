package postgres_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/idemqueue"
	"github.com/idemkit/idem/postgres"
)

// accounts is a test's world for the statement that fails: a store on a
// table of its own, and an accounts table whose email is unique and holds
// "taken@example.com" already.
type accounts struct {
	store    *idem.Store[pgx.Tx]
	driver   *postgres.Driver
	accounts string
	runs     atomic.Int64
}

func newAccounts(t *testing.T) *accounts {
	t.Helper()
	pool, _ := connect(t)
	d, err := postgres.New(t.Context(), pool, postgres.Options{})
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	name := "idemabort_" + hex.EncodeToString(b)
	store, err := idem.New(d, idem.Config{Table: name})
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Migrate(t.Context()); err != nil {
		t.Fatal(err)
	}
	a := &accounts{store: store, driver: d, accounts: name + "_accounts"}
	if _, err := pool.Exec(t.Context(), "CREATE TABLE "+a.accounts+" (email text NOT NULL UNIQUE)"); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(t.Context(), "INSERT INTO "+a.accounts+" (email) VALUES ('taken@example.com')"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, table := range []string{a.accounts, name, name + "_schema", name + "_fence"} {
			if _, err := pool.Exec(context.Background(), "DROP TABLE "+table); err != nil {
				t.Errorf("drop %s: %v", table, err)
			}
		}
	})
	return a
}

// signUp is the work of a sign-up in the three ways of writing it: a plain
// INSERT whose unique violation is answered 409 (the failure aborts the
// transaction), the same inside a savepoint, and INSERT ... ON CONFLICT DO
// NOTHING. okStatus is what it answers when the email was free.
func (a *accounts) signUp(way string, okStatus int) func(ctx context.Context, tx pgx.Tx, email string) (idem.Response, error) {
	taken := idem.Response{Status: http.StatusConflict, Body: []byte(`{"error":"email taken"}`)}
	insert := "INSERT INTO " + a.accounts + " (email) VALUES ($1)"
	return func(ctx context.Context, tx pgx.Tx, email string) (idem.Response, error) {
		a.runs.Add(1)
		var err error
		switch way {
		case "plain":
			_, err = tx.Exec(ctx, insert, email)
		case "savepoint":
			sp, berr := tx.Begin(ctx)
			if berr != nil {
				return idem.Response{}, berr
			}
			if _, err = sp.Exec(ctx, insert, email); err != nil {
				if rerr := sp.Rollback(ctx); rerr != nil {
					return idem.Response{}, rerr
				}
			} else if err = sp.Commit(ctx); err != nil {
				return idem.Response{}, err
			}
		case "on-conflict":
			tag, xerr := tx.Exec(ctx, insert+" ON CONFLICT (email) DO NOTHING", email)
			if xerr != nil {
				return idem.Response{}, xerr
			}
			if tag.RowsAffected() == 0 {
				return taken, nil
			}
		}
		switch {
		case errors.Is(a.driver.Dialect().Classify(err), idem.ErrUniqueViolation):
			return taken, nil
		case err != nil:
			return idem.Response{}, err
		}
		return idem.Response{Status: okStatus}, nil
	}
}

// count counts the accounts table's rows with email.
func (a *accounts) count(t *testing.T, email string) int64 {
	t.Helper()
	var n int64
	if err := a.driver.DB().QueryRow(t.Context(), "SELECT COUNT(*) FROM "+a.accounts+" WHERE email = $1", email).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestAnswerAfterUniqueViolation: the function inserts an account and
// answers 409 when the email is taken. A plain INSERT's unique violation
// aborts the transaction: Do returns the 409 unstored (NotStored matches
// ErrTxAborted), and a retry runs the function again. In a savepoint, or
// with ON CONFLICT DO NOTHING, the transaction stays usable and the 409 is
// stored and replayed.
func TestAnswerAfterUniqueViolation(t *testing.T) {
	for _, tc := range []struct {
		way    string
		stored bool
	}{
		{"plain", false},
		{"savepoint", true},
		{"on-conflict", true},
	} {
		t.Run(tc.way, func(t *testing.T) {
			a := newAccounts(t)
			req := idem.Request{Scope: "tenant-1 POST /accounts", Key: "sign-up-" + tc.way, Fingerprint: idem.FingerprintRequest("POST", "/accounts", []byte("taken"))}
			work := a.signUp(tc.way, http.StatusCreated)
			do := func() (idem.Result, error) {
				return a.store.Do(t.Context(), req, func(ctx context.Context, tx pgx.Tx) (idem.Response, error) {
					// An effect first, as a real handler writes (an audit
					// row): it must commit or roll back with the answer.
					if _, err := tx.Exec(ctx, "INSERT INTO "+a.accounts+" (email) VALUES ('audit-"+tc.way+"')"); err != nil {
						return idem.Response{}, err
					}
					return work(ctx, tx, "taken@example.com")
				})
			}
			res, err := do()
			if err != nil || res.Outcome != idem.Won || res.Response.Status != http.StatusConflict {
				t.Fatalf("Do: %+v, %v; want the function's 409", res, err)
			}
			if tc.stored {
				if !res.Committed || res.NotStored != nil || a.count(t, "audit-"+tc.way) != 1 {
					t.Fatalf("Do: %+v; want the 409 committed with the effect", res)
				}
				again, err := do()
				if err != nil || again.Outcome != idem.Replay || again.Response.Status != http.StatusConflict || a.runs.Load() != 1 {
					t.Fatalf("retry: %+v, %v after %d runs; want a replay of the 409", again, err, a.runs.Load())
				}
				return
			}
			if res.Committed || !errors.Is(res.NotStored, idem.ErrTxAborted) {
				t.Fatalf("Do: Committed %v, NotStored %v; want not committed, NotStored matching ErrTxAborted", res.Committed, res.NotStored)
			}
			if n := a.count(t, "audit-"+tc.way); n != 0 {
				t.Fatalf("effects = %d, want 0: the aborted transaction rolled back", n)
			}
			if _, err := a.store.Lookup(t.Context(), req.Scope, req.Key); !errors.Is(err, idem.ErrNotFound) {
				t.Fatalf("Lookup: %v, want ErrNotFound", err)
			}
			again, err := do()
			if err != nil || again.Outcome != idem.Won || again.Committed || a.runs.Load() != 2 {
				t.Fatalf("retry: %+v, %v after %d runs; want the function run again, its 409 again unstored", again, err, a.runs.Load())
			}
		})
	}
}

// lockedBuffer is a log destination for a handler on another goroutine.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestHTTPAnswerAfterUniqueViolation: through idemhttp and its Transport,
// on PostgreSQL. The handler's 409 after an aborted transaction reaches
// the client (not a 503 that the Transport keeps retrying), unstored and
// logged as a WARN with the cause: the Transport takes it as final, and a
// second call with the same key runs the handler again. A 201 after the
// failure becomes 500 "handler-failed", which the Transport does not
// retry. In a savepoint the 409 is stored: the second call gets it
// replayed.
func TestHTTPAnswerAfterUniqueViolation(t *testing.T) {
	for _, tc := range []struct {
		way       string
		okStatus  int // what the handler answers once the email is taken anyway
		email     string
		status    int
		code      string // the problem's code, for the middleware's own answers
		runs      int64  // handler runs over the two calls
		replayed  bool   // the second call's answer is a replay
		logged    string
		notLogged string
	}{
		{way: "plain", okStatus: 201, email: "taken@example.com", status: 409, runs: 2, logged: "level=WARN", notLogged: "level=ERROR"},
		{way: "plain-201", okStatus: 201, email: "taken@example.com", status: 500, code: "handler-failed", runs: 2, logged: "level=ERROR"},
		{way: "savepoint", okStatus: 201, email: "taken@example.com", status: 409, runs: 1, replayed: true, notLogged: "level=WARN"},
	} {
		t.Run(tc.way, func(t *testing.T) {
			a := newAccounts(t)
			var logged lockedBuffer
			mw, err := idemhttp.New(a.store, idemhttp.Config{
				Principal: func(*http.Request) string { return "tenant-1" },
				Logger:    slog.New(slog.NewTextHandler(&logged, nil)),
			})
			if err != nil {
				t.Fatal(err)
			}
			way := strings.TrimSuffix(tc.way, "-201")
			work := a.signUp(way, tc.okStatus)
			mux := http.NewServeMux()
			mux.Handle("POST /accounts", mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				tx, _ := idemhttp.Tx[pgx.Tx](r.Context())
				body, _ := io.ReadAll(r.Body)
				resp, err := work(r.Context(), tx, string(body))
				if err != nil {
					idemhttp.Fail(w, r, err)
					return
				}
				if tc.way == "plain-201" {
					resp.Status = http.StatusCreated // a handler that ignores the failure
				}
				w.WriteHeader(resp.Status)
				w.Write(resp.Body)
			})))
			srv := httptest.NewServer(mux)
			defer srv.Close()
			retries := 0
			client := &http.Client{Transport: &idemhttp.Transport{
				MaxAttempts: 3, BaseDelay: time.Millisecond, MaxDelay: 10 * time.Millisecond,
				OnRetry: func(idemhttp.RetryEvent) { retries++ },
			}}
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			for call := 1; call <= 2; call++ {
				req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/accounts", strings.NewReader(tc.email))
				if err != nil {
					t.Fatal(err)
				}
				req.Header.Set(idemhttp.HeaderKey, "sign-up-"+tc.way)
				resp, err := client.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				body, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != tc.status || (tc.code != "" && !strings.Contains(string(body), fmt.Sprintf(`"code":%q`, tc.code))) {
					t.Fatalf("call %d: the client got %d %s, want %d %s", call, resp.StatusCode, body, tc.status, tc.code)
				}
				if tc.status == http.StatusConflict && !strings.Contains(string(body), "email taken") {
					t.Errorf("call %d: the client got %s, want the handler's own 409", call, body)
				}
				if replayed := resp.Header.Get(idemhttp.HeaderReplayed) != ""; call == 2 && replayed != tc.replayed {
					t.Errorf("call 2: replayed %v, want %v", replayed, tc.replayed)
				}
			}
			if a.runs.Load() != tc.runs || retries != 0 {
				t.Errorf("the handler ran %d times with %d retries over two calls, want %d with none", a.runs.Load(), retries, tc.runs)
			}
			log := logged.String()
			if tc.logged != "" && (!strings.Contains(log, tc.logged) || !strings.Contains(log, "aborted")) {
				t.Errorf("log %q, want %s naming the aborted transaction", log, tc.logged)
			}
			if tc.notLogged != "" && strings.Contains(log, tc.notLogged) {
				t.Errorf("log %q, want no %s", log, tc.notLogged)
			}
		})
	}
}

// TestQueueBatchAfterUniqueViolation: a batch handler that skips a sign-up
// whose email is taken by catching the unique violation and going on (the
// batch's last message, so no later statement of the handler fails). On
// PostgreSQL that failure aborted the batch's transaction, so nothing of
// the batch can commit; that is the work's failure, not the database's, so
// each message is processed again on its own: the new sign-ups commit
// once and only the taken one is handed back (ErrTxAborted), instead of
// the whole batch waiting with it until its delivery cap.
func TestQueueBatchAfterUniqueViolation(t *testing.T) {
	a := newAccounts(t)
	c, err := idemqueue.New(a.store, idemqueue.Config{Name: "signups", RetryDelay: func(int) time.Duration { return time.Millisecond }})
	if err != nil {
		t.Fatal(err)
	}
	insert := "INSERT INTO " + a.accounts + " (email) VALUES ($1)"
	var calls [][]string
	h := func(ctx context.Context, tx pgx.Tx, ms []idemqueue.Message) ([][]byte, error) {
		var ids []string
		for _, m := range ms {
			ids = append(ids, m.ID)
		}
		calls = append(calls, ids)
		for _, m := range ms {
			_, err := tx.Exec(ctx, insert, string(m.Data))
			if errors.Is(a.driver.Dialect().Classify(err), idem.ErrUniqueViolation) {
				continue // "already signed up": wrong on PostgreSQL, the transaction is aborted
			}
			if err != nil {
				return nil, err
			}
		}
		return nil, nil
	}
	ms := []idemqueue.Message{
		{Queue: "signups", ID: "1", Data: []byte("new1@example.com"), Delivery: 1},
		{Queue: "signups", ID: "2", Data: []byte("new2@example.com"), Delivery: 1},
		{Queue: "signups", ID: "3", Data: []byte("taken@example.com"), Delivery: 1},
	}
	ds := c.ProcessBatch(t.Context(), ms, h)
	for i, d := range ds {
		want := idemqueue.Ack
		if i == 2 {
			want = idemqueue.Retry
		}
		if d.Action != want || i == 2 && !errors.Is(d.Err, idem.ErrTxAborted) {
			t.Errorf("message %s: %v/%v %v; want %v (ErrTxAborted for the taken one)", ms[i].ID, d.Action, d.Outcome, d.Err, want)
		}
	}
	want := [][]string{{"1", "2", "3"}, {"1"}, {"2"}, {"3"}}
	if !slices.EqualFunc(calls, want, slices.Equal) {
		t.Errorf("handler calls %v; want %v (the batch, then one by one)", calls, want)
	}
	for email, n := range map[string]int64{"new1@example.com": 1, "taken@example.com": 1, "new2@example.com": 1} {
		if got := a.count(t, email); got != n {
			t.Errorf("%s: %d accounts; want %d", email, got, n)
		}
	}
}
