package idemhttp_test

import (
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"time"

	"github.com/idemkit/idem/idemhttp"
)

// An intention the Transport abandoned (the server hung up on every
// attempt) is resumed later with the key the *AbandonedError carries: set
// on the new request, the Transport keeps it, so the server sees one
// intention and does the work once.
func ExampleAbandonedError() {
	var down atomic.Bool
	down.Store(true)
	keys := make(chan string, 10)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case keys <- r.Header.Get(idemhttp.HeaderKey):
		default: // more attempts than the example expects; never block
		}
		if down.Load() {
			conn, _, _ := http.NewResponseController(w).Hijack()
			conn.Close() // no answer: a network error
			return
		}
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, "order 1")
	}))
	defer srv.Close()

	client := &http.Client{Transport: &idemhttp.Transport{
		MaxAttempts:    3,
		BaseDelay:      time.Millisecond,
		AttemptTimeout: 5 * time.Second, // each attempt; the ctx or Client.Timeout bounds them all
	}}
	_, err := client.Post(srv.URL+"/orders", "application/json", strings.NewReader(`{"item":88}`))
	var ab *idemhttp.AbandonedError
	if !errors.As(err, &ab) {
		log.Fatal(err)
	}
	fmt.Println("abandoned after", ab.Attempts, "attempts, status", ab.Status)

	down.Store(false) // later, the server is back: resume with the same key
	req, _ := http.NewRequest(http.MethodPost, srv.URL+"/orders", strings.NewReader(`{"item":88}`))
	req.Header.Set(idemhttp.HeaderKey, ab.Key)
	resp, err := client.Do(req)
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	fmt.Println(resp.StatusCode, string(body))

	close(keys)
	same := true
	for k := range keys {
		same = same && k == ab.Key
	}
	fmt.Println("every attempt carried the same key:", same)
	// Output:
	// abandoned after 3 attempts, status 0
	// 201 order 1
	// every attempt carried the same key: true
}
