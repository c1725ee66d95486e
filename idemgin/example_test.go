package idemgin_test

import (
	"context"
	"database/sql"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemgin"
	"github.com/idemkit/idem/idemhttp"
	"github.com/idemkit/idem/sqlite"
)

// A payment endpoint on gin: the handler's INSERT commits with its answer,
// and the client's retry with the same Idempotency-Key gets that answer
// replayed instead of paying twice.
func Example() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "idemgin-example")
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
	if _, err := db.ExecContext(ctx, "CREATE TABLE payments (order_id TEXT, amount INTEGER)"); err != nil {
		panic(err)
	}

	mw, err := idemgin.New(store, idemhttp.Config{
		// After authentication: who is asking scopes the key.
		Principal: func(r *http.Request) string { return r.Header.Get("X-Tenant") },
	})
	if err != nil {
		panic(err)
	}
	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	r.POST("/orders/:id/pay", mw.Wrap(func(c *gin.Context) {
		var body struct {
			Amount int `json:"amount" binding:"required"`
		}
		if err := c.ShouldBindJSON(&body); err != nil {
			c.AbortWithStatusJSON(http.StatusBadRequest, gin.H{"error": err.Error()})
			return
		}
		tx, _ := idemhttp.Tx[*sql.Tx](c.Request.Context())
		if _, err := tx.ExecContext(c.Request.Context(), "INSERT INTO payments VALUES (?, ?)", c.Param("id"), body.Amount); err != nil {
			_ = c.Error(err) // rolled back; a serialization failure runs the handler again
			return
		}
		c.JSON(http.StatusCreated, gin.H{"order": c.Param("id"), "paid": body.Amount})
	}))

	for range 2 {
		req := httptest.NewRequest(http.MethodPost, "/orders/42/pay", strings.NewReader(`{"amount":1500}`))
		req.Header.Set("X-Tenant", "tenant-7")
		req.Header.Set(idemhttp.HeaderKey, "pay-42-a")
		rec := httptest.NewRecorder()
		r.ServeHTTP(rec, req)
		fmt.Println(rec.Code, rec.Header().Get(idemhttp.HeaderReplayed), rec.Body.String())
	}
	var payments int
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM payments").Scan(&payments); err != nil {
		panic(err)
	}
	fmt.Println("payments:", payments)
	// Output:
	// 201  {"order":"42","paid":1500}
	// 201 true {"order":"42","paid":1500}
	// payments: 1
}
