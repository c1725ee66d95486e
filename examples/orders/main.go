// Command orders is a small order service that shows idem on net/http:
// POST /orders creates an order exactly once per Idempotency-Key, however
// often a client retries, because the order row and the stored answer
// commit in one transaction.
//
//	go run ./examples/orders                   # SQLite file orders.db in the working directory
//	go run ./examples/orders -db /tmp/o.db -addr 127.0.0.1:9090
//	go run ./examples/orders -dsn postgres://user:pass@localhost:5432/app
//	go run ./examples/orders -dsn mysql://user:pass@localhost:3306/app
//
// Routes:
//
//	POST /orders       body {"customer":4711,"item":88}; needs Idempotency-Key;
//	                   201 with Location /orders/{id} and the order as JSON
//	GET  /orders/{id}  the order, if it belongs to the caller's tenant
//
// The tenant is the X-Tenant header ("anonymous" when absent). It scopes
// the keys, so two tenants never share one. A real service takes it from
// the authenticated principal instead of trusting a header.
package main

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/idemkit/idem/examples/internal/serve"
	"github.com/idemkit/idem/idemhttp"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "address to listen on")
	dbPath := flag.String("db", "orders.db", "SQLite database file, created if missing")
	dsn := flag.String("dsn", "", "database URL, instead of -db: sqlite:PATH, postgres://user:pass@host:5432/db or mysql://user:pass@host:3306/db")
	flag.Parse()
	serve.Main("orders", func(ctx context.Context, logger *slog.Logger) error {
		return run(ctx, *addr, cmp.Or(*dsn, *dbPath), logger)
	})
}

// run serves until ctx ends, then shuts down gracefully.
func run(ctx context.Context, addr, dsn string, logger *slog.Logger) error {
	b, err := openStore(ctx, dsn)
	if err != nil {
		return err
	}
	defer b.db.Close()
	handler, err := newServer(b, logger)
	if err != nil {
		return err
	}
	return serve.Until(ctx, "orders", addr, handler, logger, "database", b.name,
		"tenant", "X-Tenant header, default anonymous", "retention", b.store.Config().Retention)
}

// service holds what the handlers need.
type service struct {
	db     *sql.DB
	sql    orderSQL
	logger *slog.Logger
}

// newServer returns the routes: POST /orders behind the idempotency
// middleware, GET /orders/{id} without it.
func newServer(b *backend, logger *slog.Logger) (http.Handler, error) {
	mw, err := idemhttp.New(b.store, idemhttp.Config{Principal: tenant, Logger: logger})
	if err != nil {
		return nil, err
	}
	s := &service{db: b.db, sql: b.sql, logger: logger}
	mux := http.NewServeMux()
	mux.Handle("POST /orders", mw.Wrap(http.HandlerFunc(s.createOrder)))
	mux.HandleFunc("GET /orders/{id}", s.getOrder)
	return mux, nil
}

// tenant is who is asking. Demo only: trust an authenticated principal, not
// a header.
func tenant(r *http.Request) string { return cmp.Or(r.Header.Get("X-Tenant"), "anonymous") }

type order struct {
	ID       int64  `json:"id"`
	Customer int64  `json:"customer"`
	Item     int64  `json:"item"`
	Created  string `json:"created"`
}

// createOrder runs inside the middleware's transaction: the INSERT and the
// stored answer commit together, or neither does.
func (s *service) createOrder(w http.ResponseWriter, r *http.Request) {
	tx, ok := idemhttp.Tx[*sql.Tx](r.Context())
	if !ok {
		idemhttp.Fail(w, r, errors.New("createOrder must run behind idemhttp"))
		return
	}
	var in struct{ Customer, Item int64 }
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil || in.Customer <= 0 || in.Item <= 0 {
		http.Error(w, `want a JSON body like {"customer":4711,"item":88}`, http.StatusBadRequest)
		return
	}
	o := order{Customer: in.Customer, Item: in.Item, Created: time.Now().UTC().Format(time.RFC3339Nano)}
	id, err := s.sql.insertOrder(r.Context(), tx, tenant(r), o.Customer, o.Item, o.Created)
	o.ID = id
	if err != nil {
		idemhttp.Fail(w, r, err) // rolls back; the client may retry
		return
	}
	w.Header().Set("Location", fmt.Sprintf("/orders/%d", o.ID))
	serve.JSON(w, http.StatusCreated, o)
}

// getOrder reads an order of the caller's tenant.
func (s *service) getOrder(w http.ResponseWriter, r *http.Request) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil {
		http.NotFound(w, r)
		return
	}
	o := order{ID: id}
	err = s.db.QueryRowContext(r.Context(), s.sql.get, id, tenant(r)).Scan(&o.Customer, &o.Item, &o.Created)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		http.NotFound(w, r)
	case err != nil:
		s.logger.Error("orders: read order", "id", id, "error", err)
		http.Error(w, "could not read the order", http.StatusInternalServerError)
	default:
		serve.JSON(w, http.StatusOK, o)
	}
}
