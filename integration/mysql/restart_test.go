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
	conformance.RunCases(t, restartBackend(t), []conformance.Case[*sql.Tx]{conformance.History[*sql.Tx]()})
}

// TestRestarts runs the Restarts case on a MySQL or MariaDB server of its
// own: Do and lease work while the server restarts six times, every
// outcome held to what the table holds.
func TestRestarts(t *testing.T) {
	conformance.RunCases(t, restartBackend(t), []conformance.Case[*sql.Tx]{conformance.Restarts[*sql.Tx]()})
}

// restartBackend is a Backend on a restartable server of t's own.
func restartBackend(t *testing.T) conformance.Backend[*sql.Tx] {
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
	return conformance.Backend[*sql.Tx]{
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
	}
}
