package mysql_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/idemkit/idem/conformance"
	"github.com/idemkit/idem/dialect"
	"github.com/idemkit/idem/integration/containers"
	"github.com/idemkit/idem/mysql"
)

// TestHistoryRestart runs the History case on a MySQL or MariaDB server of
// its own, which it restarts once or twice during the run (a graceful
// shutdown, then a kill): every operation that met a restart is modelled
// by what the dialect reported, and the final checks hold once the server
// is back.
func TestHistoryRestart(t *testing.T) {
	srv := containers.RestartableMySQL(t)
	db, err := sql.Open("mysql", srv.DSN+"?timeout=5s")
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(8)
	db.SetMaxIdleConns(8)
	t.Cleanup(func() { db.Close() })
	t.Cleanup(func() {
		if srv.Restarts() == 0 {
			t.Error("the server was never restarted")
		}
	})
	conformance.RunCases(t, conformance.Backend[*sql.Tx]{
		Name: "mysql/restart",
		Open: func(t *testing.T) dialect.Driver[*sql.Tx] {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			d, err := mysql.New(ctx, db, mysql.Options{})
			if err != nil {
				t.Fatal(err)
			}
			return d
		},
		Restart: srv.Restart,
	}, []conformance.Case[*sql.Tx]{conformance.History[*sql.Tx]()})
}
