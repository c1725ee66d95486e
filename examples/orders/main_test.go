package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem/examples/internal/exampletest"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/integration/containers"
)

func TestMain(m *testing.M) { containers.Main(m) }

// testService starts the example in-process on a fresh SQLite file.
func testService(t *testing.T) (*backend, http.Handler) {
	t.Helper()
	return testServiceOn(t, filepath.Join(t.TempDir(), "orders.db"))
}

// testServiceOn starts the example in-process on the database dsn names.
func testServiceOn(t *testing.T, dsn string) (*backend, http.Handler) {
	t.Helper()
	b, err := openStore(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.db.Close() })
	h, err := newServer(b, slog.New(slog.NewTextHandler(exampletest.Log{T: t}, nil)))
	if err != nil {
		t.Fatal(err)
	}
	return b, h
}

// fault kinds, decided per attempt.
const (
	pass        = iota
	hangUpAfter // the handler ran; the connection closes without an answer
	badGateway  // the handler ran; a load balancer answers 502 instead
	lostRequest // the handler never ran; 502
)

// faults sits in front of the service like a flaky network and load
// balancer. For a deterministic subset of attempts (a hash of the request
// body and the attempt number; every attempt after the third passes) it
// drops the answer after the handler ran, or the request before. It
// records, per logical request (its body), the keys it saw and the first
// original (not replayed) answer the service produced.
type faults struct {
	next http.Handler

	mu       sync.Mutex
	attempts map[string]int             // body -> attempts seen
	keys     map[string]map[string]bool // body -> Idempotency-Keys seen
	original map[string][]byte          // body -> first non-replayed 201 body
	dropped  map[string]bool            // body -> its original answer was lost
	kinds    map[int]int                // fault kind -> count
	// duplicates counts original answers for a request that already had one.
	duplicates int
}

func newFaults(next http.Handler) *faults {
	return &faults{next: next, attempts: map[string]int{}, keys: map[string]map[string]bool{},
		original: map[string][]byte{}, dropped: map[string]bool{}, kinds: map[int]int{}}
}

func decide(body []byte, attempt int) int {
	if attempt > 3 {
		return pass
	}
	h := fnv.New64a()
	fmt.Fprintf(h, "seed-42|%s|%d", body, attempt)
	switch h.Sum64() % 10 {
	case 0, 1:
		return hangUpAfter
	case 2:
		return badGateway
	case 3:
		return lostRequest
	}
	return pass
}

func (f *faults) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		panic(err)
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	id := string(body)
	f.mu.Lock()
	f.attempts[id]++
	kind := decide(body, f.attempts[id])
	f.kinds[kind]++
	if f.keys[id] == nil {
		f.keys[id] = map[string]bool{}
	}
	f.keys[id][r.Header.Get(idemhttp.HeaderKey)] = true
	f.mu.Unlock()

	if kind == lostRequest {
		http.Error(w, "upstream unavailable", http.StatusBadGateway)
		return
	}
	rec := httptest.NewRecorder()
	f.next.ServeHTTP(rec, r)
	isOriginal := rec.Code == http.StatusCreated && rec.Header().Get(idemhttp.HeaderReplayed) == ""
	f.mu.Lock()
	if isOriginal {
		if _, dup := f.original[id]; dup {
			f.duplicates++
		} else {
			f.original[id] = bytes.Clone(rec.Body.Bytes())
			f.dropped[id] = kind != pass
		}
	}
	f.mu.Unlock()

	switch kind {
	case hangUpAfter:
		conn, _, err := http.NewResponseController(w).Hijack()
		if err != nil {
			panic(err)
		}
		conn.Close()
	case badGateway:
		http.Error(w, "upstream timed out", http.StatusBadGateway)
	default:
		for name, values := range rec.Header() {
			w.Header()[name] = values
		}
		w.WriteHeader(rec.Code)
		w.Write(rec.Body.Bytes())
	}
}

// TestExactlyOnceThroughFaults starts the example in-process behind a
// fault that drops some answers after the handler ran (and some requests
// before), drives it with the retrying client from many goroutines, and
// checks that every order exists exactly once and every client got the
// original answer.
func TestExactlyOnceThroughFaults(t *testing.T) {
	exactlyOnceThroughFaults(t, filepath.Join(t.TempDir(), "orders.db"))
}

// The same on PostgreSQL and MySQL, each in a fresh database of the test
// server (see conformance/containers for where the servers come from).
func TestExactlyOnceThroughFaultsPostgres(t *testing.T) {
	exactlyOnceThroughFaults(t, freshPostgres(t))
}

func TestExactlyOnceThroughFaultsMySQL(t *testing.T) {
	exactlyOnceThroughFaults(t, freshMySQL(t))
}

func exactlyOnceThroughFaults(t *testing.T, dsn string) {
	const workers, perWorker = 16, 25
	b, service := testServiceOn(t, dsn)
	f := newFaults(service)
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	client := &http.Client{Transport: &idemhttp.Transport{MaxAttempts: 12, BaseDelay: time.Millisecond, MaxDelay: 20 * time.Millisecond}}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	type result struct {
		body, tenant string
		status       int
		header       http.Header
		answer       []byte
		err          error
	}
	results := make([]result, workers*perWorker)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range perWorker {
				r := &results[w*perWorker+i]
				r.tenant = fmt.Sprintf("tenant-%d", w%4)
				r.body = fmt.Sprintf(`{"customer":%d,"item":%d}`, 1000+w, i+1)
				req, err := http.NewRequestWithContext(ctx, http.MethodPost, srv.URL+"/orders", strings.NewReader(r.body))
				if err != nil {
					r.err = err
					continue
				}
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set("X-Tenant", r.tenant)
				resp, err := client.Do(req)
				if err != nil {
					r.err = err
					continue
				}
				r.status, r.header = resp.StatusCode, resp.Header
				r.answer, r.err = io.ReadAll(resp.Body)
				resp.Body.Close()
			}
		})
	}
	wg.Wait()

	var orders, distinct int
	if err := b.db.QueryRowContext(ctx, "SELECT COUNT(*) FROM orders").Scan(&orders); err != nil {
		t.Fatal(err)
	}
	if err := b.db.QueryRowContext(ctx, "SELECT COUNT(*) FROM (SELECT DISTINCT customer, item FROM orders) d").Scan(&distinct); err != nil {
		t.Fatal(err)
	}
	if orders != len(results) || distinct != len(results) {
		t.Fatalf("orders table: %d rows, %d distinct (customer, item); want %d of each: every order exactly once", orders, distinct, len(results))
	}

	if f.duplicates != 0 {
		t.Errorf("the service produced %d second original answers, want 0", f.duplicates)
	}
	replayed := 0
	for _, r := range results {
		if r.err != nil || r.status != http.StatusCreated {
			t.Errorf("%s: %d %q %v, want 201", r.body, r.status, r.answer, r.err)
			continue
		}
		if n := len(f.keys[r.body]); n != 1 {
			t.Errorf("%s: the server saw %d different keys, want 1 for all retries", r.body, n)
		}
		if !bytes.Equal(r.answer, f.original[r.body]) {
			t.Errorf("%s: got %q, want the original answer %q", r.body, r.answer, f.original[r.body])
		}
		if got := r.header.Get(idemhttp.HeaderReplayed) == "true"; got != f.dropped[r.body] {
			t.Errorf("%s: replayed=%v, but the original answer was lost=%v", r.body, got, f.dropped[r.body])
		}
		if r.header.Get(idemhttp.HeaderReplayed) == "true" {
			replayed++
		}
		// The answer is the order row as it is in the database.
		var o order
		if err := json.Unmarshal(r.answer, &o); err != nil {
			t.Errorf("%s: answer %q: %v", r.body, r.answer, err)
			continue
		}
		if loc := r.header.Get("Location"); loc != fmt.Sprintf("/orders/%d", o.ID) {
			t.Errorf("%s: Location %q for order %d", r.body, loc, o.ID)
		}
		row := order{ID: o.ID}
		err := b.db.QueryRowContext(ctx, b.sql.get, o.ID, r.tenant).Scan(&row.Customer, &row.Item, &row.Created)
		if err != nil {
			t.Errorf("%s: order %d of %s: %v", r.body, o.ID, r.tenant, err)
			continue
		}
		want, _ := json.Marshal(row)
		if !bytes.Equal(r.answer, append(want, '\n')) || r.body != fmt.Sprintf(`{"customer":%d,"item":%d}`, row.Customer, row.Item) {
			t.Errorf("%s as %s: answer %q, row %s", r.body, r.tenant, r.answer, want)
		}
	}
	t.Logf("%d orders; faults: %d hang-ups and %d 502s after the handler ran, %d 502s before; %d clients got a replay",
		orders, f.kinds[hangUpAfter], f.kinds[badGateway], f.kinds[lostRequest], replayed)
	if f.kinds[hangUpAfter] == 0 || f.kinds[badGateway] == 0 || f.kinds[lostRequest] == 0 || replayed == 0 {
		t.Errorf("the faults did not all happen (%v) or nothing was replayed (%d): the test proves nothing", f.kinds, replayed)
	}
}

func TestOrdersRoutes(t *testing.T) {
	_, h := testService(t)
	do := func(method, path, tenant, key, body string) *httptest.ResponseRecorder {
		req := httptest.NewRequest(method, path, strings.NewReader(body))
		if tenant != "" {
			req.Header.Set("X-Tenant", tenant)
		}
		if key != "" {
			req.Header.Set(idemhttp.HeaderKey, key)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec
	}
	first := do("POST", "/orders", "", "k1", `{"customer":4711,"item":88}`)
	if first.Code != 201 || first.Header().Get("Location") != "/orders/1" {
		t.Fatalf("create: %d %v %q", first.Code, first.Header(), first.Body)
	}
	again := do("POST", "/orders", "", "k1", `{"customer":4711,"item":88}`)
	if again.Code != 201 || again.Body.String() != first.Body.String() || again.Header().Get(idemhttp.HeaderReplayed) != "true" {
		t.Fatalf("retry: %d %v %q, want a replay of %q", again.Code, again.Header(), again.Body, first.Body)
	}
	if rec := do("POST", "/orders", "", "k1", `{"customer":4711,"item":89}`); rec.Code != 422 {
		t.Errorf("same key, other body: %d, want 422", rec.Code)
	}
	if rec := do("POST", "/orders", "other", "k1", `{"customer":4711,"item":88}`); rec.Code != 201 || rec.Header().Get("Location") != "/orders/2" {
		t.Errorf("same key, other tenant: %d %v, want a new order", rec.Code, rec.Header())
	}
	if rec := do("POST", "/orders", "", "k2", `{"customer":0}`); rec.Code != 400 {
		t.Errorf("invalid order: %d, want 400", rec.Code)
	}
	if rec := do("POST", "/orders", "", "", `{"customer":1,"item":1}`); rec.Code != 400 {
		t.Errorf("no key: %d, want 400", rec.Code)
	}
	if rec := do("GET", "/orders/1", "", "", ""); rec.Code != 200 || rec.Body.String() != first.Body.String() {
		t.Errorf("GET /orders/1: %d %q, want %q", rec.Code, rec.Body, first.Body)
	}
	if rec := do("GET", "/orders/1", "other", "", ""); rec.Code != 404 {
		t.Errorf("GET another tenant's order: %d, want 404", rec.Code)
	}
}

func TestOpenStoreBadDSN(t *testing.T) {
	for _, dsn := range []string{
		"postgres://u:secret@127.0.0.1:1/db", // nothing listens on port 1
		"mysql://u:secret@127.0.0.1:1/db",
		"mysql://u:secret@127.0.0.1:1/db?notAParameter=1",
		"redis://x",
	} {
		_, err := openStore(t.Context(), dsn)
		if err == nil {
			t.Errorf("%s: no error", dsn)
			continue
		}
		if strings.Contains(err.Error(), "secret") {
			t.Errorf("%s: error %q shows the password", dsn, err)
		}
	}
}

// freshPostgres and freshMySQL make empty databases on the test servers.
func freshPostgres(t *testing.T) string { return exampletest.FreshPostgres(t, "orders") }

func freshMySQL(t *testing.T) string { return exampletest.FreshMySQL(t, "orders") }
