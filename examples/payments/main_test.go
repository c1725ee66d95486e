package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idemkit/idem/examples/internal/exampledb"
	"github.com/idemkit/idem/examples/internal/exampletest"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/integration/containers"
)

func TestMain(m *testing.M) { containers.Main(m) }

// provider is a fake payment provider with Stripe-like idempotency keys:
// the same key and body get the first answer again; the same key with
// another body is a 400. Amounts of 402 are declined; every seventh new
// charge first fails with a 503 (a transient failure the service must
// retry).
type provider struct {
	mu       sync.Mutex
	answers  map[string][]byte // idempotency key -> body | answer
	charges  map[string][]string
	calls    int
	replays  int
	failures int
	seq      int
}

func newProvider() *provider {
	return &provider{answers: map[string][]byte{}, charges: map[string][]string{}}
}

func (p *provider) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	key := r.Header.Get("Idempotency-Key")
	var in struct {
		Amount    int64
		Reference string
	}
	if r.URL.Path != "/v1/charges" || key == "" || json.Unmarshal(body, &in) != nil {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls++
	if stored, ok := p.answers[key]; ok {
		sent, answer, _ := bytes.Cut(stored, []byte{'|'})
		if !bytes.Equal(sent, body) {
			http.Error(w, "idempotency key reused with another request", http.StatusBadRequest)
			return
		}
		p.replays++
		w.Header().Set("Idempotent-Replayed", "true")
		w.Write(answer)
		return
	}
	if p.calls%7 == 0 {
		p.failures++
		http.Error(w, "try again", http.StatusServiceUnavailable)
		return
	}
	if in.Amount == 402 {
		w.WriteHeader(http.StatusPaymentRequired)
		return
	}
	p.seq++
	id := fmt.Sprintf("ch_%04d", p.seq)
	p.charges[in.Reference] = append(p.charges[in.Reference], id)
	answer, _ := json.Marshal(map[string]any{"id": id, "amount": in.Amount})
	p.answers[key] = append(append(body, '|'), answer...)
	w.Write(answer)
}

// binary builds the service once per test binary.
var binary = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "idem-payments-*")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "payments")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go build: %v\n%s", err, out)
	}
	return bin, nil
})

// supervisor runs the service as a process and starts it again whenever
// it crashes, until stop: a crash is a real process exit, with whatever it
// held in memory lost.
type supervisor struct {
	t       *testing.T
	args    []string
	crashes atomic.Int64
	stopped atomic.Bool
	cmd     atomic.Pointer[exec.Cmd]
	done    chan struct{}
}

func supervise(t *testing.T, args ...string) *supervisor {
	t.Helper()
	bin, err := binary()
	if err != nil {
		t.Fatal(err)
	}
	s := &supervisor{t: t, args: append([]string{bin}, args...), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		for restarts := 0; !s.stopped.Load() && restarts < 200; restarts++ {
			cmd := exec.Command(s.args[0], s.args[1:]...)
			cmd.Stderr = exampletest.Log{T: t}
			if err := cmd.Start(); err != nil {
				t.Errorf("start the service: %v", err)
				return
			}
			s.cmd.Store(cmd)
			err := cmd.Wait()
			var exit *exec.ExitError
			switch {
			case s.stopped.Load():
				return
			case errors.As(err, &exit) && exit.ExitCode() == 3:
				s.crashes.Add(1) // the injected crash: start it again
			default:
				t.Errorf("the service exited: %v", err)
				return
			}
		}
	}()
	t.Cleanup(s.stop)
	return s
}

func (s *supervisor) stop() {
	if s.stopped.Swap(true) {
		return
	}
	if cmd := s.cmd.Load(); cmd != nil && cmd.Process != nil {
		cmd.Process.Signal(os.Interrupt)
	}
	select {
	case <-s.done:
	case <-time.After(30 * time.Second):
		if cmd := s.cmd.Load(); cmd != nil && cmd.Process != nil {
			cmd.Process.Kill()
		}
		<-s.done
	}
}

// freeAddr returns a loopback address no one listens on.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

func TestChargedOnceThroughCrashes(t *testing.T) {
	chargedOnceThroughCrashes(t, filepath.Join(t.TempDir(), "payments.db"))
}

func TestChargedOnceThroughCrashesPostgres(t *testing.T) {
	chargedOnceThroughCrashes(t, exampletest.FreshPostgres(t, "payments"))
}

func TestChargedOnceThroughCrashesMySQL(t *testing.T) {
	chargedOnceThroughCrashes(t, exampletest.FreshMySQL(t, "payments"))
}

// chargedOnceThroughCrashes runs the service as a process that dies after
// every fifth provider answer, before recording it, and is started again;
// sends every order twice at once (the same key) with the retrying client;
// and checks that every order was charged exactly once, that both senders
// of an order got the same answer, and that the database agrees.
func chargedOnceThroughCrashes(t *testing.T, dsn string) {
	const orders = 30
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	p := newProvider()
	providerSrv := httptest.NewServer(p)
	t.Cleanup(providerSrv.Close)
	addr := freeAddr(t)
	svc := supervise(t, "-addr", addr, "-dsn", dsn, "-provider", providerSrv.URL, "-lease", "1s", "-crash-after-charges", "5")

	client := &http.Client{Transport: &idemhttp.Transport{MaxAttempts: 200, BaseDelay: 10 * time.Millisecond, MaxDelay: 300 * time.Millisecond}}
	type answer struct {
		status int
		body   []byte
		err    error
	}
	answers := make([][2]answer, orders)
	var wg sync.WaitGroup
	for i := range orders {
		amount := 1000 + i
		if i%10 == 9 {
			amount = 402 // declined
		}
		body := fmt.Sprintf(`{"customer":%d,"amount":%d}`, 4700+i, amount)
		for j := range 2 { // the same intention sent twice at once
			wg.Go(func() {
				req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/orders", strings.NewReader(body))
				if err != nil {
					answers[i][j].err = err
					return
				}
				req.Header.Set(idemhttp.HeaderKey, fmt.Sprintf("order-%d", i))
				req.Header.Set("X-Tenant", "shop-1")
				resp, err := client.Do(req)
				if err != nil {
					answers[i][j].err = err
					return
				}
				defer resp.Body.Close()
				answers[i][j].body, answers[i][j].err = io.ReadAll(resp.Body)
				answers[i][j].status = resp.StatusCode
			})
		}
	}
	wg.Wait()
	svc.stop()

	db, err := exampledb.Open(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.SQL.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	declined := 0
	for i, pair := range answers {
		a, b := pair[0], pair[1]
		if a.err != nil || b.err != nil {
			t.Errorf("order %d: %v / %v", i, a.err, b.err)
			continue
		}
		if a.status != b.status || !bytes.Equal(a.body, b.body) {
			t.Errorf("order %d: the two senders got %d %s and %d %s, want the same answer", i, a.status, a.body, b.status, b.body)
		}
		var o order
		if err := json.Unmarshal(a.body, &o); err != nil {
			t.Errorf("order %d: answer %d %q: %v", i, a.status, a.body, err)
			continue
		}
		if i%10 == 9 {
			declined++
			if a.status != http.StatusPaymentRequired || len(p.charges[o.ID]) != 0 {
				t.Errorf("order %d: %d with %d charges, want a stored 402 and no charge", i, a.status, len(p.charges[o.ID]))
			}
			continue
		}
		if a.status != http.StatusCreated {
			t.Errorf("order %d: %d %s, want 201", i, a.status, a.body)
			continue
		}
		if got := p.charges[o.ID]; len(got) != 1 || got[0] != o.Charge {
			t.Errorf("order %d (%s): provider charges %v, answer says %q: want exactly one, the answer's", i, o.ID, got, o.Charge)
		}
		var stored sql.NullString
		q := "SELECT charge FROM payment_orders WHERE id = ?"
		if db.Flavor == exampledb.PostgreSQL {
			q = "SELECT charge FROM payment_orders WHERE id = $1"
		}
		if err := db.SQL.QueryRowContext(ctx, q, o.ID).Scan(&stored); err != nil || stored.String != o.Charge {
			t.Errorf("order %d: the database holds charge %v (%v), want %q", i, stored, err, o.Charge)
		}
	}
	var rows int
	if err := db.SQL.QueryRowContext(ctx, "SELECT COUNT(*) FROM payment_orders").Scan(&rows); err != nil || rows != orders {
		t.Errorf("payment_orders has %d rows (%v), want %d: one per order", rows, err, orders)
	}
	charged := 0
	for _, c := range p.charges {
		charged += len(c)
	}
	t.Logf("%d orders (%d declined): %d charges, %d provider calls, %d answered from the provider's keys, %d transient 503s; %d crashes of the service",
		orders, declined, charged, p.calls, p.replays, p.failures, svc.crashes.Load())
	if charged != orders-declined {
		t.Errorf("%d charges for %d orders that should be charged", charged, orders-declined)
	}
	if svc.crashes.Load() < 2 || p.replays == 0 || p.failures == 0 {
		t.Errorf("crashes %d, provider replays %d, transient failures %d: the faults did not happen, the test proves nothing",
			svc.crashes.Load(), p.replays, p.failures)
	}
}
