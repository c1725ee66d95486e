package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/examples/internal/exampledb"
	"github.com/idemkit/idem/examples/internal/serve"
	"github.com/idemkit/idem/idemhttp"
)

// service holds what the handler needs.
type service struct {
	db       *exampledb.DB
	store    *idem.Store[*sql.Tx]
	sql      orderSQL
	provider *http.Client
	cfg      config
	logger   *slog.Logger
	routes   http.Handler
	answers  atomic.Int64 // provider answers, for the crash injection
}

// orderSQL is the order table's SQL for one database.
type orderSQL struct {
	schema, insert, setCharge string
}

var orderSQLs = map[exampledb.Flavor]orderSQL{
	exampledb.SQLite: {
		schema: `CREATE TABLE IF NOT EXISTS payment_orders (
	id TEXT PRIMARY KEY, tenant TEXT NOT NULL, customer INTEGER NOT NULL, amount INTEGER NOT NULL, charge TEXT)`,
		insert:    `INSERT INTO payment_orders (id, tenant, customer, amount) VALUES (?, ?, ?, ?)`,
		setCharge: `UPDATE payment_orders SET charge = ? WHERE id = ?`,
	},
	exampledb.PostgreSQL: {
		schema: `CREATE TABLE IF NOT EXISTS payment_orders (
	id text PRIMARY KEY, tenant text NOT NULL, customer bigint NOT NULL, amount bigint NOT NULL, charge text)`,
		insert:    `INSERT INTO payment_orders (id, tenant, customer, amount) VALUES ($1, $2, $3, $4)`,
		setCharge: `UPDATE payment_orders SET charge = $1 WHERE id = $2`,
	},
	exampledb.MySQL: {
		schema: `CREATE TABLE IF NOT EXISTS payment_orders (
	id VARCHAR(64) PRIMARY KEY, tenant VARCHAR(255) NOT NULL, customer BIGINT NOT NULL, amount BIGINT NOT NULL, charge VARCHAR(64))`,
		insert:    `INSERT INTO payment_orders (id, tenant, customer, amount) VALUES (?, ?, ?, ?)`,
		setCharge: `UPDATE payment_orders SET charge = ? WHERE id = ?`,
	},
}

// newService opens the database, migrates idem's table, creates the
// order table and routes POST /orders through the lease-mode middleware.
func newService(ctx context.Context, cfg config, logger *slog.Logger) (s *service, err error) {
	db, err := exampledb.Open(ctx, cfg.dsn)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			db.SQL.Close()
		}
	}()
	// A retry waits for a live lease at most half of it: the store
	// refuses a Lease shorter than twice WaitBound.
	store, err := idem.New(db.Driver, idem.Config{Lease: cfg.lease, WaitBound: min(idem.DefaultWaitBound, cfg.lease/2)})
	if err != nil {
		return nil, err
	}
	if err := store.Migrate(ctx); err != nil {
		return nil, err
	}
	q := orderSQLs[db.Flavor]
	if _, err := db.SQL.ExecContext(ctx, q.schema); err != nil {
		return nil, fmt.Errorf("create the order table: %w", err)
	}
	mw, err := idemhttp.New(store, idemhttp.Config{Principal: tenant, Logger: logger})
	if err != nil {
		return nil, err
	}
	s = &service{db: db, store: store, sql: q, cfg: cfg, logger: logger,
		provider: &http.Client{Timeout: 10 * time.Second}}
	mux := http.NewServeMux()
	mux.Handle("POST /orders", mw.WrapLease(http.HandlerFunc(s.createOrder)))
	s.routes = mux
	return s, nil
}

// order is the answer to POST /orders.
type order struct {
	ID       string `json:"order"`
	Customer int64  `json:"customer"`
	Amount   int64  `json:"amount"`
	Charge   string `json:"charge,omitempty"`
	Error    string `json:"error,omitempty"`
}

// createOrder runs under a lease, in recorded steps; see the package doc.
func (s *service) createOrder(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	l, ok := idemhttp.Lease[*sql.Tx](ctx)
	if !ok {
		idemhttp.Fail(w, r, errors.New("createOrder must run behind idemhttp's WrapLease"))
		return
	}
	var in struct{ Customer, Amount int64 }
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil || in.Customer <= 0 || in.Amount <= 0 {
		http.Error(w, `want a JSON body like {"customer":4711,"amount":1999}`, http.StatusBadRequest)
		return
	}
	id, err := l.DownstreamKey("order")
	if err != nil {
		idemhttp.Fail(w, r, err)
		return
	}
	o := order{ID: id, Customer: in.Customer, Amount: in.Amount}
	step, data := l.Step()
	if step == "" {
		err := l.RecordStep(ctx, "order", []byte(o.ID), func(ctx context.Context, tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, s.sql.insert, o.ID, tenant(r), o.Customer, o.Amount)
			return err
		})
		if err != nil {
			idemhttp.Fail(w, r, err) // a retry resumes: nothing was recorded
			return
		}
		step = "order"
	}
	if step == "charged" {
		o.Charge = string(data) // a takeover: the charge was made and recorded
	} else {
		key, err := l.DownstreamKey("charge")
		if err != nil {
			idemhttp.Fail(w, r, err)
			return
		}
		charge, err := s.charge(ctx, key, o)
		if err != nil {
			idemhttp.Fail(w, r, err) // transient: a retry resumes with the same provider key
			return
		}
		if charge.declined {
			o.Error = "card declined"
			serve.JSON(w, http.StatusPaymentRequired, o) // an outcome: stored and replayed
			return
		}
		s.maybeCrash()
		err = l.RecordStep(ctx, "charged", []byte(charge.ID), func(ctx context.Context, tx *sql.Tx) error {
			_, err := tx.ExecContext(ctx, s.sql.setCharge, charge.ID, o.ID)
			return err
		})
		if err != nil {
			idemhttp.Fail(w, r, err)
			return
		}
		o.Charge = charge.ID
	}
	w.Header().Set("Location", "/orders/"+o.ID)
	serve.JSON(w, http.StatusCreated, o)
}

// charge is the provider's answer.
type charge struct {
	ID       string `json:"id"`
	declined bool
}

// charge asks the provider to charge o under key, its idempotency key. A
// network error or a 5xx is returned as an error (worth a retry); 402 is a
// decline.
func (s *service) charge(ctx context.Context, key string, o order) (charge, error) {
	body, _ := json.Marshal(map[string]any{"amount": o.Amount, "reference": o.ID})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(s.cfg.provider, "/")+"/v1/charges", bytes.NewReader(body))
	if err != nil {
		return charge{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", key)
	resp, err := s.provider.Do(req)
	if err != nil {
		return charge{}, fmt.Errorf("payment provider: %w", err)
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusPaymentRequired:
		return charge{declined: true}, nil
	case resp.StatusCode/100 != 2:
		return charge{}, fmt.Errorf("payment provider: %s", resp.Status)
	}
	var c charge
	if err := json.NewDecoder(resp.Body).Decode(&c); err != nil || c.ID == "" {
		return charge{}, fmt.Errorf("payment provider: unreadable answer (%v)", err)
	}
	return c, nil
}

// maybeCrash is the fault injection of -crash-after-charges: the process
// dies between the provider's answer and recording it, the worst moment.
func (s *service) maybeCrash() {
	if n := s.answers.Add(1); s.cfg.crashAfter > 0 && n >= int64(s.cfg.crashAfter) {
		s.logger.Warn("payments: crashing on purpose after a provider answer (-crash-after-charges)", "answers", n)
		os.Exit(3)
	}
}
