// Command payments is an order service whose handler calls a payment
// provider: idem's lease mode at work. POST /orders creates an order and
// charges it exactly once per Idempotency-Key, however often the client
// retries and even when the service dies between the provider's answer and
// recording it.
//
//	go run ./examples/payments -provider http://127.0.0.1:8081    # SQLite file payments.db
//	go run ./examples/payments -dsn postgres://user:pass@localhost:5432/app -provider ...
//
// Routes:
//
//	POST /orders  body {"customer":4711,"amount":1999}; needs Idempotency-Key;
//	              201 {"order":...,"customer":...,"amount":...,"charge":"ch_..."}
//	              402 when the provider declines the card (stored: a retry gets
//	              the same 402)
//
// The handler runs under idemhttp's WrapLease, in steps, each recorded with
// its own database writes:
//
//  1. "order": insert the order row. Its id is the lease's downstream key
//     for the step, the same for every attempt of this request.
//  2. "charged": POST the charge to the provider with the downstream key of
//     the step as the provider's Idempotency-Key, then record the charge id
//     with the order. A takeover after a crash between the two repeats the
//     call with the same key, and the provider answers with the same charge.
//
// The tenant is the X-Tenant header ("anonymous" when absent); a real
// service takes it from the authenticated principal.
package main

import (
	"cmp"
	"context"
	"flag"
	"log/slog"
	"net/http"
	"time"

	"github.com/idemkit/idem/examples/internal/serve"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "address to listen on")
	dsn := flag.String("dsn", "payments.db", "database: a SQLite path, postgres://... or mysql://...")
	provider := flag.String("provider", "http://127.0.0.1:8081", "the payment provider's base URL")
	lease := flag.Duration("lease", 10*time.Second, "how long a request's lease lasts without being extended")
	crashAfter := flag.Int("crash-after-charges", 0, "fault injection for tests: exit at once after this many provider answers, before recording the last (0: never)")
	flag.Parse()

	cfg := config{dsn: *dsn, provider: *provider, lease: *lease, crashAfter: *crashAfter}
	serve.Main("payments", func(ctx context.Context, logger *slog.Logger) error { return run(ctx, *addr, cfg, logger) })
}

// config is what the service is started with.
type config struct {
	dsn, provider string
	lease         time.Duration
	crashAfter    int
}

// run serves until ctx ends, then shuts down gracefully.
func run(ctx context.Context, addr string, cfg config, logger *slog.Logger) error {
	s, err := newService(ctx, cfg, logger)
	if err != nil {
		return err
	}
	defer s.db.SQL.Close()
	return serve.Until(ctx, "payments", addr, s.routes, logger, "database", s.db.Name, "provider", cfg.provider,
		"tenant", "X-Tenant header, default anonymous")
}

// tenant is who is asking. Demo only: trust an authenticated principal, not
// a header.
func tenant(r *http.Request) string { return cmp.Or(r.Header.Get("X-Tenant"), "anonymous") }
