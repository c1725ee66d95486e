package idemecho_test

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/idemkit/idem/idemhttp"
)

// TestServerErrorKeepsStatus: an *echo.HTTPError of 500 or more is the
// handler's answer with that status, rendered by echo's error handler (as
// one below 500 is, with the headers the handler set), but never stored:
// its writes roll back, it is logged, and the retry runs the handler
// again. Under WrapLease the lease is released the same way.
func TestServerErrorKeepsStatus(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		lease bool
		err   error
		want  int
		body  string
	}{
		{"503", false, echo.NewHTTPError(http.StatusServiceUnavailable, "inventory down"), http.StatusServiceUnavailable, `{"message":"inventory down"}`},
		{"500", false, echo.NewHTTPError(http.StatusInternalServerError, "ledger broken"), http.StatusInternalServerError, `{"message":"ledger broken"}`},
		{"503 with an internal error", false, echo.NewHTTPError(http.StatusServiceUnavailable, "inventory down").SetInternal(errors.New("dial tcp: refused")), http.StatusServiceUnavailable, `{"message":"inventory down"}`},
		{"503 under WrapLease", true, echo.NewHTTPError(http.StatusServiceUnavailable, "carrier down"), http.StatusServiceUnavailable, `{"message":"carrier down"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			a := newApp(t)
			wrap := a.mw.Wrap()
			if tc.lease {
				wrap = a.mw.WrapLease()
			}
			a.e.POST("/orders/:id", func(c echo.Context) error {
				run := a.runs.Add(1)
				if !tc.lease {
					if _, err := a.insert(c); err != nil {
						return err
					}
				}
				if run == 1 {
					c.Response().Header().Set("Retry-After", "7")
					return tc.err
				}
				return c.JSON(http.StatusCreated, map[string]any{"run": run})
			}, wrap)

			first := a.send(t, http.MethodPost, "/orders/A-1", "key-1", `{"item":"book"}`)
			if first.status != tc.want || strings.TrimSpace(first.body) != tc.body || first.header.Get("Retry-After") != "7" {
				t.Fatalf("first: %d %q %v, want echo's rendering %d %s with the handler's Retry-After", first.status, first.body, first.header, tc.want, tc.body)
			}
			if orders, records := a.count(t, "orders"), a.count(t, "idempotency_keys"); orders != 0 || (!tc.lease && records != 0) {
				t.Fatalf("%d orders and %d records after a %d; want the writes and the claim rolled back", orders, records, tc.want)
			}
			if log := a.log.String(); !strings.Contains(log, "level=ERROR") || !strings.Contains(log, "server error") || !strings.Contains(log, "status="+strconv.Itoa(tc.want)) || !strings.Contains(log, tc.err.Error()) {
				t.Errorf("the middleware's log %q has no ERROR about the handler's server error", log)
			}
			again := a.send(t, http.MethodPost, "/orders/A-1", "key-1", `{"item":"book"}`)
			if again.status != http.StatusCreated || again.header.Get(idemhttp.HeaderReplayed) != "" || a.runs.Load() != 2 {
				t.Fatalf("retry: %d %q after %d runs, want the handler to run again and answer 201", again.status, again.body, a.runs.Load())
			}
		})
	}
}

// serve is an http.RoundTripper that serves requests with h in process.
type serve struct{ h http.Handler }

func (s serve) RoundTrip(r *http.Request) (*http.Response, error) {
	rec := httptest.NewRecorder()
	s.h.ServeHTTP(rec, r)
	res := rec.Result()
	res.Request = r
	return res, nil
}

// TestServerErrorRetriedByTransport: a handler's 503 HTTPError reaches the
// client as a 503, which idemhttp's Transport retries with the same key;
// the retry runs the handler again and the client gets its 201.
func TestServerErrorRetriedByTransport(t *testing.T) {
	t.Parallel()
	a := newApp(t)
	a.e.POST("/orders/:id", func(c echo.Context) error {
		run := a.runs.Add(1)
		if _, err := a.insert(c); err != nil {
			return err
		}
		if run == 1 {
			c.Response().Header().Set("Retry-After", "1")
			return echo.NewHTTPError(http.StatusServiceUnavailable, "inventory down")
		}
		return c.JSON(http.StatusCreated, map[string]any{"run": run})
	}, a.mw.Wrap())

	client := &http.Client{Transport: &idemhttp.Transport{Base: serve{a.e}, MaxDelay: time.Millisecond}}
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, "http://orders.test/orders/A-1", strings.NewReader(`{"item":"book"}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("X-Tenant", "tenant-1")
	req.Header.Set(echo.HeaderContentType, echo.MIMEApplicationJSON)
	res, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	if res.StatusCode != http.StatusCreated || a.runs.Load() != 2 || a.count(t, "orders") != 1 {
		t.Fatalf("client got %d %q after %d runs and %d orders; want the retried 201, 2 runs, 1 order", res.StatusCode, body, a.runs.Load(), a.count(t, "orders"))
	}
}
