package idemecho_test

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/idemkit/idem/idemhttp"
)

// TestFlush: c.Response().Flush inside a run sends nothing early (the
// answer is buffered until the commit) and does not panic; the answer is
// stored and replayed whole. A handler that only flushed has not answered,
// and Hijack fails with http.ErrNotSupported.
func TestFlush(t *testing.T) {
	t.Parallel()
	a := newApp(t)
	a.e.POST("/orders/:id", func(c echo.Context) error {
		id, err := a.insert(c)
		if err != nil {
			return err
		}
		c.Response().Flush()
		c.Response().WriteHeader(http.StatusCreated)
		if _, err := c.Response().Write([]byte("part one,")); err != nil {
			return err
		}
		c.Response().Flush()
		if err := http.NewResponseController(c.Response()).Flush(); err != nil {
			return err
		}
		_, err = c.Response().Write([]byte(" part two of order " + c.Param("id") + " " + string(rune('0'+id))))
		return err
	}, a.mw.Wrap())
	a.e.POST("/flush-only", func(c echo.Context) error {
		c.Response().Flush()
		if _, _, err := c.Response().Hijack(); !errors.Is(err, http.ErrNotSupported) {
			return fmt.Errorf("hijack: %v, want http.ErrNotSupported", err)
		}
		return nil
	}, a.mw.Wrap())

	first := a.send(t, http.MethodPost, "/orders/A-1", "key-1", `{"item":"book"}`)
	if first.status != http.StatusCreated || first.body != "part one, part two of order A-1 1" {
		t.Fatalf("first: %d %q, want the whole 201", first.status, first.body)
	}
	replay := a.send(t, http.MethodPost, "/orders/A-1", "key-1", `{"item":"book"}`)
	if replay.status != http.StatusCreated || replay.body != first.body || replay.header.Get(idemhttp.HeaderReplayed) != "true" {
		t.Fatalf("replay: %d %q %v, want a replay of %q", replay.status, replay.body, replay.header, first.body)
	}
	only := a.send(t, http.MethodPost, "/flush-only", "key-2", `{}`)
	if only.status != http.StatusInternalServerError || only.problem() != "no-response" || !strings.Contains(a.log.String(), "without writing") {
		t.Fatalf("flush only: %d %q, want 500 no-response", only.status, only.body)
	}
}
