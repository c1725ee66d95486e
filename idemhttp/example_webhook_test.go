package idemhttp_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/sqlite"
)

// webhookStore is the store of the webhook examples: SQLite in memory,
// with a table of the events received.
func webhookStore(ctx context.Context) (*sql.DB, *idem.Store[*sql.Tx]) {
	db, err := sqlite.Open(":memory:")
	if err != nil {
		log.Fatal(err)
	}
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
	if _, err := db.ExecContext(ctx, `CREATE TABLE events (id TEXT PRIMARY KEY, source TEXT NOT NULL)`); err != nil {
		log.Fatal(err)
	}
	return db, store
}

// printAnswer prints a webhook answer: the status, the problem's code or
// the body, and whether it was replayed.
func printAnswer(what string, rec *httptest.ResponseRecorder) {
	if rec.Header().Get("Content-Type") == "application/problem+json" {
		var p struct{ Code string }
		_ = json.Unmarshal(rec.Body.Bytes(), &p)
		fmt.Printf("%-12s %d %s\n", what, rec.Code, p.Code)
		return
	}
	fmt.Printf("%-12s %d replayed=%q %s\n", what, rec.Code, rec.Header().Get(idemhttp.HeaderReplayed), rec.Body)
}

// A Stripe-style sender: the key is the event's "id" in the JSON body, and
// Stripe-Signature carries "t=<unix time>,v1=<hex HMAC-SHA256 of
// t.body>". The signature is checked before anything is claimed, so a
// forged event with a real id neither runs nor takes the id; the real
// delivery runs once, and a redelivery (signed anew) gets the stored 200.
func ExampleJSONKeyFunc() {
	ctx := context.Background()
	db, store := webhookStore(ctx)
	defer db.Close()
	secret := []byte("whsec_example")
	const tolerance = 5 * time.Minute

	mw, err := idemhttp.New(store, idemhttp.Config{
		// The sender is the principal: its event ids live in a scope of
		// their own, apart from other senders' and from API clients' keys.
		Principal:   func(*http.Request) string { return "webhook:stripe" },
		Key:         idemhttp.JSONKeyFunc("id"),
		Fingerprint: idemhttp.TargetFingerprint, // the event id names the event
		Verify: func(r *http.Request, body []byte) error {
			var ts string
			var sigs [][]byte
			for _, part := range strings.Split(r.Header.Get("Stripe-Signature"), ",") {
				name, value, _ := strings.Cut(part, "=")
				switch name {
				case "t":
					ts = value
				case "v1":
					if sig, err := hex.DecodeString(value); err == nil {
						sigs = append(sigs, sig)
					}
				}
			}
			sec, err := strconv.ParseInt(ts, 10, 64)
			if err != nil {
				return errors.New("Stripe-Signature has no timestamp")
			}
			if age := time.Since(time.Unix(sec, 0)); age > tolerance || age < -tolerance {
				return fmt.Errorf("signed %v ago, outside the tolerance", age)
			}
			mac := hmac.New(sha256.New, secret)
			mac.Write([]byte(ts + "."))
			mac.Write(body)
			want := mac.Sum(nil)
			for _, sig := range sigs {
				if hmac.Equal(sig, want) {
					return nil
				}
			}
			return errors.New("no v1 signature matches")
		},
		Logger: slog.New(slog.DiscardHandler), // refusals are logged at WARN
	})
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("POST /webhooks/stripe", mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tx, _ := idemhttp.Tx[*sql.Tx](r.Context())
		var event struct{ ID, Type string }
		if err := json.NewDecoder(r.Body).Decode(&event); err != nil {
			idemhttp.Fail(w, r, err)
			return
		}
		if _, err := tx.ExecContext(r.Context(), `INSERT INTO events (id, source) VALUES (?, 'stripe')`, event.ID); err != nil {
			idemhttp.Fail(w, r, err) // rolled back, 500, not stored: the redelivery runs it again
			return
		}
		fmt.Fprintf(w, `{"received":%q}`, event.Type)
	})))

	// deliver sends body as the sender would, signed with key.
	deliver := func(what string, key []byte, body string) {
		ts := strconv.FormatInt(time.Now().Unix(), 10)
		mac := hmac.New(sha256.New, key)
		mac.Write([]byte(ts + "." + body))
		req := httptest.NewRequest(http.MethodPost, "/webhooks/stripe", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Stripe-Signature", "t="+ts+",v1="+hex.EncodeToString(mac.Sum(nil)))
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, req)
		printAnswer(what, rec)
	}
	event := `{"id":"evt_1","type":"invoice.paid"}`
	deliver("forged", []byte("guessed"), event)
	deliver("delivery", secret, event)
	deliver("redelivery", secret, event)
	deliver("no id", secret, `{"type":"invoice.paid"}`)

	var n int
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM events`).Scan(&n); err != nil {
		log.Fatal(err)
	}
	fmt.Println("events:", n)
	// Output:
	// forged       401 unverified
	// delivery     200 replayed="" {"received":"invoice.paid"}
	// redelivery   200 replayed="true" {"received":"invoice.paid"}
	// no id        400 key-missing
	// events: 1
}

// A GitHub-style sender: the key is the X-GitHub-Delivery header, and
// X-Hub-Signature-256 carries "sha256=<hex HMAC-SHA256 of the body>". A
// handler that fails answers 500 and stores nothing, so the redelivery
// does the work; the next one gets the stored 2xx.
func ExampleHeaderKeyFunc() {
	ctx := context.Background()
	db, store := webhookStore(ctx)
	defer db.Close()
	secret := []byte("github-secret")

	mw, err := idemhttp.New(store, idemhttp.Config{
		Principal:   func(*http.Request) string { return "webhook:github" },
		Key:         idemhttp.HeaderKeyFunc("X-GitHub-Delivery"),
		Fingerprint: idemhttp.TargetFingerprint,
		Verify: func(r *http.Request, body []byte) error {
			sig, ok := strings.CutPrefix(r.Header.Get("X-Hub-Signature-256"), "sha256=")
			got, err := hex.DecodeString(sig)
			if !ok || err != nil {
				return errors.New("X-Hub-Signature-256 is not sha256=<hex>")
			}
			mac := hmac.New(sha256.New, secret)
			mac.Write(body)
			if !hmac.Equal(got, mac.Sum(nil)) {
				return errors.New("X-Hub-Signature-256 does not match")
			}
			return nil
		},
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		log.Fatal(err)
	}
	down := true // the first attempt meets a database that is down
	mux := http.NewServeMux()
	mux.Handle("POST /webhooks/github", mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if down {
			down = false
			idemhttp.Fail(w, r, errors.New("database down"))
			return
		}
		tx, _ := idemhttp.Tx[*sql.Tx](r.Context())
		id := r.Header.Get("X-GitHub-Delivery")
		if _, err := tx.ExecContext(r.Context(), `INSERT INTO events (id, source) VALUES (?, 'github')`, id); err != nil {
			idemhttp.Fail(w, r, err)
			return
		}
		w.WriteHeader(http.StatusAccepted)
		fmt.Fprintf(w, "%s event %s", r.Header.Get("X-GitHub-Event"), id)
	})))

	deliver := func(what, delivery, body string) {
		mac := hmac.New(sha256.New, secret)
		mac.Write([]byte(body))
		req := httptest.NewRequest(http.MethodPost, "/webhooks/github", strings.NewReader(body))
		req.Header.Set("X-GitHub-Event", "push")
		req.Header.Set("X-Hub-Signature-256", "sha256="+hex.EncodeToString(mac.Sum(nil)))
		if delivery != "" {
			req.Header.Set("X-GitHub-Delivery", delivery)
		}
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, req)
		printAnswer(what, rec)
	}
	body := `{"ref":"refs/heads/main"}`
	deliver("delivery", "72d3162e-cc78-11e3-81ab-4c9367dc0958", body)
	deliver("redelivery", "72d3162e-cc78-11e3-81ab-4c9367dc0958", body)
	deliver("redelivery", "72d3162e-cc78-11e3-81ab-4c9367dc0958", body)
	deliver("no delivery", "", body)

	var n int
	if err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM events`).Scan(&n); err != nil {
		log.Fatal(err)
	}
	fmt.Println("events:", n)
	// Output:
	// delivery     500 handler-failed
	// redelivery   202 replayed="" push event 72d3162e-cc78-11e3-81ab-4c9367dc0958
	// redelivery   202 replayed="true" push event 72d3162e-cc78-11e3-81ab-4c9367dc0958
	// no delivery  400 key-missing
	// events: 1
}
