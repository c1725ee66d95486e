package idem_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"
	"net/http"
	"time"

	"github.com/idemkit/idem"
)

// RunRecovery resumes work whose lease holder is gone: here a holder that
// charged a card, recorded the step and was killed before answering. The
// runner takes its lease over, the function registered for the operation
// resumes from the recorded step (it does not charge again) and the answer
// is stored, so the client's retry replays it.
func ExampleRunRecovery() {
	const payOp = `POST "/orders/{id}/pay"` // the operation idemhttp puts in the scope
	now := time.Date(2031, 3, 14, 12, 0, 0, 0, time.UTC)
	db, store := openOrders(idem.Config{Lease: time.Minute, Clock: func() time.Time { return now }})
	defer db.Close()

	// The holder charges, records the step, and its process is killed.
	req := idem.Request{Scope: idem.Scope("tenant-42", payOp), Key: "pay-7", Fingerprint: idem.FingerprintRequest("POST", "/orders/7/pay", nil)}
	held, err := store.Lease(context.Background(), req)
	if err != nil {
		log.Fatal(err)
	}
	if err := held.RecordStep(context.Background(), "charged", []byte("ch_7"), nil); err != nil {
		log.Fatal(err)
	}
	now = now.Add(2 * time.Minute) // no heartbeat: its lease ends

	ctx, stop := context.WithCancel(context.Background())
	err = idem.RunRecovery(ctx, store, idem.Recovery[*sql.Tx]{
		Operations: map[string]idem.LeaseFunc[*sql.Tx]{
			payOp: func(ctx context.Context, l *idem.Lease[*sql.Tx]) (idem.Response, error) {
				step, charge := l.Step()
				if step != "charged" {
					return idem.Response{}, errors.New("nothing charged yet: the client's retry has the request")
				}
				fmt.Println("resumed", l.Record.Key, "from step", step, "with token", l.Token())
				return idem.Response{Status: http.StatusCreated, Body: charge}, nil
			},
		},
		Jitter: -1, // start the first round at once
		Report: func(r idem.RecoveryRound) {
			fmt.Println("round: listed", r.Listed, "completed", r.Completed)
			stop() // one round here; a service runs it until it shuts down
		},
	})
	fmt.Println("runner stopped:", err)

	retry, err := store.Lease(context.Background(), req)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("client's retry:", retry.Outcome, retry.Response.Status, string(retry.Response.Body))
	_, err = held.Complete(context.Background(), idem.Response{Status: http.StatusCreated}, nil)
	fmt.Println("killed holder fenced:", errors.Is(err, idem.ErrLeaseLost))
	// Output:
	// resumed pay-7 from step charged with token 2
	// round: listed 1 completed 1
	// runner stopped: context canceled
	// client's retry: replay 201 ch_7
	// killed holder fenced: true
}
