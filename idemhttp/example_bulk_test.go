package idemhttp_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/sqlite"
)

// A bulk endpoint whose items each carry their own key: the endpoint is
// not wrapped by the middleware (the request as a whole has no key);
// it validates each item first (an invalid item is answered 400 and never
// claimed), then protects the valid ones with Store.DoBatch in one
// transaction, and answers each item on its own: created now, replayed
// from its first attempt, or refused. A client that retries the whole
// bulk request after a lost answer gets every item's first outcome back,
// and nothing is done twice.
func Example_bulkEndpoint() {
	ctx := context.Background()
	db, err := sqlite.Open(":memory:")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	drv, err := sqlite.New(ctx, db, sqlite.Options{})
	if err != nil {
		log.Fatal(err)
	}
	store, err := idem.New(drv, idem.Config{})
	if err != nil {
		log.Fatal(err)
	}
	if err := store.Migrate(ctx); err != nil {
		log.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE orders (id INTEGER PRIMARY KEY, item INTEGER NOT NULL)`); err != nil {
		log.Fatal(err)
	}

	type item struct {
		Key  string `json:"key"`
		Item int    `json:"item"`
	}
	type answer struct {
		Key      string          `json:"key"`
		Status   int             `json:"status"`
		Replayed bool            `json:"replayed,omitempty"`
		Body     json.RawMessage `json:"body"`
	}
	bulk := func(w http.ResponseWriter, r *http.Request) {
		principal := r.Header.Get("X-Tenant") // after authentication
		var in struct{ Items []item }
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil || len(in.Items) == 0 || len(in.Items) > idem.MaxBatch {
			http.Error(w, "want 1 to 1000 items", http.StatusBadRequest)
			return
		}
		out := make([]answer, len(in.Items))
		var (
			reqs []idem.Request
			at   []int // at[j]: the item of reqs[j]
		)
		for i, it := range in.Items {
			out[i].Key = it.Key
			if idem.ValidateKey(it.Key) != nil || it.Item <= 0 {
				// Never began: not claimed, the corrected item can reuse its key.
				out[i].Status, out[i].Body = http.StatusBadRequest, json.RawMessage(`{"error":"invalid item"}`)
				continue
			}
			// One scope per principal and item route, as a single POST /orders
			// would have, and a fingerprint of what the item asks for.
			var h idem.Hasher
			h.AddString("bulk order")
			h.AddString(fmt.Sprint(it.Item))
			reqs = append(reqs, idem.Request{Scope: idemhttp.Scope(principal, "POST", "/orders"), Key: it.Key, Fingerprint: h.Sum()})
			at = append(at, i)
		}
		if len(reqs) > 0 {
			byKey := make(map[string]item, len(reqs))
			for _, i := range at {
				byKey[in.Items[i].Key] = in.Items[i]
			}
			res, err := store.DoBatch(r.Context(), reqs, func(ctx context.Context, tx *sql.Tx, won []idem.Request) ([]idem.Response, error) {
				resps := make([]idem.Response, len(won))
				for j, req := range won { // or one multi-row INSERT for all of them
					var id int64
					if err := tx.QueryRowContext(ctx, `INSERT INTO orders (item) VALUES (?) RETURNING id`, byKey[req.Key].Item).Scan(&id); err != nil {
						return nil, err
					}
					resps[j] = idem.Response{Status: http.StatusCreated, Body: fmt.Appendf(nil, `{"id":%d}`, id)}
				}
				return resps, nil
			})
			if err != nil { // nothing was committed: the client retries the whole request
				http.Error(w, "try again", http.StatusServiceUnavailable)
				return
			}
			for j, r := range res {
				a := &out[at[j]]
				switch r.Outcome {
				case idem.Won, idem.Replay:
					a.Status, a.Body, a.Replayed = r.Response.Status, r.Response.Body, r.Outcome == idem.Replay
				case idem.Mismatch:
					a.Status, a.Body = http.StatusUnprocessableEntity, json.RawMessage(`{"error":"key reused with another item"}`)
				default: // InFlight
					a.Status, a.Body = http.StatusConflict, json.RawMessage(`{"error":"in progress; retry"}`)
				}
			}
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusMultiStatus)
		_ = json.NewEncoder(w).Encode(map[string][]answer{"items": out})
	}

	post := func(body string) {
		req := httptest.NewRequest(http.MethodPost, "/orders/bulk", strings.NewReader(body))
		req.Header.Set("X-Tenant", "acme")
		rec := httptest.NewRecorder()
		bulk(rec, req)
		fmt.Print(rec.Code, " ", rec.Body.String())
	}
	post(`{"items":[{"key":"o-1","item":7},{"key":"o-2","item":-1},{"key":"o-3","item":9}]}`)
	// The answer was lost; the client sends the same request again, with
	// the second item corrected.
	post(`{"items":[{"key":"o-1","item":7},{"key":"o-2","item":8},{"key":"o-3","item":9}]}`)
	var n int
	_ = db.QueryRowContext(ctx, `SELECT COUNT(*) FROM orders`).Scan(&n)
	fmt.Println("orders:", n)
	// Output:
	// 207 {"items":[{"key":"o-1","status":201,"body":{"id":1}},{"key":"o-2","status":400,"body":{"error":"invalid item"}},{"key":"o-3","status":201,"body":{"id":2}}]}
	// 207 {"items":[{"key":"o-1","status":201,"replayed":true,"body":{"id":1}},{"key":"o-2","status":201,"body":{"id":3}},{"key":"o-3","status":201,"replayed":true,"body":{"id":2}}]}
	// orders: 3
}
