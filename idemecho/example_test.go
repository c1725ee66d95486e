package idemecho_test

import (
	"context"
	"database/sql"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemecho"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/sqlite"
)

// Example protects an echo route: the handler writes the order in the
// middleware's transaction and answers as echo handlers do; the retry with
// the same key replays the first answer, and a 4xx the handler returns is
// an answer too.
func Example() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "idemecho")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	db, err := sqlite.Open(filepath.Join(dir, "idem.db"))
	if err != nil {
		panic(err)
	}
	defer db.Close()
	drv, err := sqlite.New(ctx, db, sqlite.Options{})
	if err != nil {
		panic(err)
	}
	store, err := idem.New(drv, idem.Config{})
	if err != nil {
		panic(err)
	}
	if err := store.Migrate(ctx); err != nil {
		panic(err)
	}
	if _, err := db.ExecContext(ctx, "CREATE TABLE orders (id INTEGER PRIMARY KEY, item TEXT NOT NULL)"); err != nil {
		panic(err)
	}

	mw, err := idemecho.New(store, idemhttp.Config{
		// After authentication, this is who is asking.
		Principal: func(r *http.Request) string { return r.Header.Get("X-Tenant") },
	})
	if err != nil {
		panic(err)
	}
	e := echo.New()
	v1 := e.Group("/v1", mw.Wrap())
	v1.POST("/carts/:id/orders", func(c echo.Context) error {
		var o struct {
			Item string `json:"item"`
		}
		if err := c.Bind(&o); err != nil {
			return err // a 400: not stored, the client may correct the request and send it with the same key
		}
		if o.Item == "" {
			return echo.NewHTTPError(http.StatusUnprocessableEntity, "item is required") // a 422: not stored either
		}
		tx, _ := idemhttp.Tx[*sql.Tx](c.Request().Context())
		res, err := tx.ExecContext(c.Request().Context(), "INSERT INTO orders (item) VALUES (?)", o.Item)
		if err != nil {
			return err // rolled back; a serialization failure runs the handler again
		}
		id, _ := res.LastInsertId()
		return c.JSON(http.StatusCreated, map[string]any{"order": id, "cart": c.Param("id")})
	})

	post := func(key, body string) {
		req := httptest.NewRequest(http.MethodPost, "/v1/carts/7/orders", strings.NewReader(body))
		req.Header.Set(echo.HeaderContentType, echo.MIMEApplicationJSON)
		req.Header.Set("X-Tenant", "tenant-42")
		req.Header.Set(idemhttp.HeaderKey, key)
		rec := httptest.NewRecorder()
		e.ServeHTTP(rec, req)
		body2, _ := io.ReadAll(rec.Body)
		fmt.Printf("%d replayed=%q %s", rec.Code, rec.Header().Get(idemhttp.HeaderReplayed), body2)
	}
	post("order-1", `{"item":"book"}`)
	post("order-1", `{"item":"book"}`) // the client's retry
	post("order-2", `{}`)
	post("order-2", `{"item":"pen"}`) // corrected, with the same key: it runs

	rec, err := store.Lookup(ctx, idemhttp.Scope("tenant-42", http.MethodPost, "/v1/carts/:id/orders"), "order-1")
	fmt.Println(rec.Response.Status, err)
	// Output:
	// 201 replayed="" {"cart":"7","order":1}
	// 201 replayed="true" {"cart":"7","order":1}
	// 422 replayed="" {"message":"item is required"}
	// 201 replayed="" {"cart":"7","order":2}
	// 201 <nil>
}
