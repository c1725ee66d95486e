package main

import (
	"os"
	"testing"

	"github.com/testcontainers/testcontainers-go"

	"github.com/idemkit/idem"
)

// TestQueueOnNATS consumes a stream with the bare consumer and with
// idemqueue on SQLite: every message is acked once, each writes one order,
// and the cells are the report's.
func TestQueueOnNATS(t *testing.T) {
	if os.Getenv(envNATSURL) == "" {
		testcontainers.SkipIfProviderIsNotHealthy(t)
		if os.Getenv(envNATSImage) == "" {
			t.Setenv(envNATSImage, "idem-standin/nats:2.10")
		}
	}
	tg := newTestSQLite(t)
	tg.backend = "sqlite"
	srv := &servers{}
	t.Cleanup(func() {
		if err := srv.close(); err != nil {
			t.Error(err)
		}
	})
	rep := &report{}
	const msgs = 300
	before := countOrders(t, tg)
	if err := queueTest(t.Context(), options{queue: msgs, queueConc: 4}, tg, srv, "qtest", rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.cells) != 2 {
		t.Fatalf("%d cells, want queue-bare and queue-idem", len(rep.cells))
	}
	for _, c := range rep.cells {
		if c.ops != msgs || c.errors != 0 || c.outcomes[idem.Won] != msgs {
			t.Errorf("%s: %d acked, outcomes %v, %d errors (first %v), want %d won", c.path, c.ops, c.outcomes, c.errors, c.firstErr, msgs)
		}
	}
	if n := countOrders(t, tg) - before; n != 2*msgs {
		t.Errorf("%d orders, want %d", n, 2*msgs)
	}
}
