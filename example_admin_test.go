package idem_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"os"
	"time"

	"github.com/idemkit/idem"
)

// seedExample stores a completed record for key and, for "stuck", a claim
// committed without its response.
func seedExample(ctx context.Context, db *sql.DB, store *idem.Store[*sql.Tx], scope string, keys ...string) {
	for _, key := range keys {
		req := idem.Request{Scope: scope, Key: key, Fingerprint: idem.FingerprintRequest("POST", "/orders", []byte(key))}
		if key == "stuck" {
			tx, err := db.BeginTx(ctx, nil)
			if err != nil {
				log.Fatal(err)
			}
			if _, err := store.Claim(ctx, tx, req); err != nil {
				log.Fatal(err)
			}
			if err := tx.Commit(); err != nil { // a bug: committed without Complete
				log.Fatal(err)
			}
			continue
		}
		if _, err := store.Do(ctx, req, func(context.Context, *sql.Tx) (idem.Response, error) {
			return idem.Response{Status: 201, Body: []byte(`{"id":1}`)}, nil
		}); err != nil {
			log.Fatal(err)
		}
	}
}

// An operator finds a tenant's stuck keys (pending and older than a
// minute), looks at one, and clears it: Delete refuses a live pending
// record, ForceDelete removes it.
func ExampleStore_List() {
	ctx := context.Background()
	now := time.Date(2031, 3, 14, 12, 0, 0, 0, time.UTC)
	db, store := openOrders(idem.Config{Clock: func() time.Time { return now }})
	defer db.Close()
	seedExample(ctx, db, store, idem.Scope("tenant-42", "POST /orders"), "a1", "stuck", "a2")
	seedExample(ctx, db, store, idem.Scope("tenant-7", "POST /orders"), "b1")
	now = now.Add(10 * time.Minute)

	page, err := store.List(ctx, idem.ListFilter{
		ScopePrefix: idem.ScopePrefix("tenant-42"),
		States:      []idem.State{idem.StatePending},
		MinAge:      time.Minute,
		Expiry:      idem.LiveOnly,
	})
	if err != nil {
		log.Fatal(err)
	}
	for _, r := range page.Records {
		fmt.Printf("%s %s %v, claimed %v ago\n", r.Scope, r.Key, r.State, r.Age)
	}
	stuck := page.Records[0]
	err = store.Delete(ctx, stuck.Scope, stuck.Key)
	fmt.Println("delete:", errors.Is(err, idem.ErrRecordInFlight))
	if err := store.ForceDelete(ctx, stuck.Scope, stuck.Key); err != nil {
		log.Fatal(err)
	}
	counts, err := store.Counts(ctx, idem.ScopePrefix("tenant-42"))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("tenant-42:", counts.Live[idem.StatePending], "pending,", counts.Live[idem.StateCompleted], "completed")
	// Output:
	// "tenant-42" POST /orders stuck pending, claimed 10m0s ago
	// delete: true
	// tenant-42: 0 pending, 2 completed
}

// Inspect shows one record whatever its state, even expired (which Lookup
// does not): the sizes of what it stores, not the response.
func ExampleStore_Inspect() {
	ctx := context.Background()
	now := time.Date(2031, 3, 14, 12, 0, 0, 0, time.UTC)
	db, store := openOrders(idem.Config{Clock: func() time.Time { return now }})
	defer db.Close()
	seedExample(ctx, db, store, idem.Scope("tenant-42", "POST /orders"), "a1")
	now = now.Add(25 * time.Hour)

	r, err := store.Inspect(ctx, idem.Scope("tenant-42", "POST /orders"), "a1")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%v, status %d, %d body bytes, expired %v, claimed %v ago\n", r.State, r.Status, r.BodyBytes, r.Expired, r.Age)
	_, err = store.Lookup(ctx, idem.Scope("tenant-42", "POST /orders"), "a1")
	fmt.Println("lookup:", errors.Is(err, idem.ErrNotFound))
	// Output:
	// completed, status 201, 8 body bytes, expired true, claimed 25h0m0s ago
	// lookup: true
}

// RunPurges purges on a schedule until its context ends; run it in every
// replica. Here it runs once (the context ends soon after).
func ExampleRunPurges() {
	now := time.Date(2031, 3, 14, 12, 0, 0, 0, time.UTC)
	db, store := openOrders(idem.Config{Clock: func() time.Time { return now }})
	defer db.Close()
	seedExample(context.Background(), db, store, idem.Scope("tenant-42", "POST /orders"), "a1", "a2")
	now = now.Add(48 * time.Hour)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	err := idem.RunPurges(ctx, store, idem.PurgeSchedule{
		Interval: time.Hour,
		Jitter:   -1, // none, for the example
		Report: func(r idem.PurgeRun) {
			fmt.Println("deleted", r.Result.Deleted, "error", r.Err)
			cancel()
		},
	})
	fmt.Println(err)
	// Output:
	// deleted 2 error <nil>
	// context canceled
}

// A Logger gets what an operator acts on; an Observer gets every event
// (package idemotel turns them into OpenTelemetry metrics and spans).
func ExampleConfig_observer() {
	ctx := context.Background()
	logger := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		},
	}))
	outcomes := map[idem.Outcome]int{}
	db, store := openOrders(idem.Config{Logger: logger, Observer: observerFunc(func(_ context.Context, e idem.Event) {
		if e.Kind == idem.EventClaim {
			outcomes[e.Outcome]++
		}
	})})
	defer db.Close()
	req := idem.Request{Scope: idem.Scope("tenant-42", "POST /orders"), Key: "k1", Fingerprint: idem.FingerprintRequest("POST", "/orders", []byte("a"))}
	other := req
	other.Fingerprint = idem.FingerprintRequest("POST", "/orders", []byte("b"))
	for _, r := range []idem.Request{req, req, other} {
		if _, err := store.Do(ctx, r, func(context.Context, *sql.Tx) (idem.Response, error) {
			return idem.Response{Status: 201}, nil
		}); err != nil {
			log.Fatal(err)
		}
	}
	fmt.Println(outcomes[idem.Won], "won,", outcomes[idem.Replay], "replay,", outcomes[idem.Mismatch], "mismatch")
	// Output:
	// level=WARN msg="idem: key reused with a different request" table=idempotency_keys scope="\"tenant-42\" POST /orders" key=k1
	// 1 won, 1 replay, 1 mismatch
}

// observerFunc adapts a function to idem.Observer.
type observerFunc func(context.Context, idem.Event)

func (f observerFunc) Observe(ctx context.Context, e idem.Event) { f(ctx, e) }
