package mysql

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	mysqldriver "github.com/go-sql-driver/mysql"

	"github.com/idemkit/idem/dialect"
)

// lagging is a schema transaction whose vtgate refuses the first refusals
// statements as planned on a VSchema without their table.
type lagging struct {
	refusals int
	err      error // answered once the refusals are spent
	tries    int
}

func (l *lagging) answer() error {
	l.tries++
	if l.tries <= l.refusals {
		return &mysqldriver.MySQLError{Number: 1105, Message: "table idem_fence not found"}
	}
	return l.err
}

func (l *lagging) Exec(context.Context, string, ...any) (int64, error) { return 1, l.answer() }
func (l *lagging) Query(context.Context, string, ...any) (dialect.Rows, error) {
	if err := l.answer(); err != nil {
		return nil, err
	}
	return &scriptedRows{next: -1}, nil
}
func (l *lagging) Commit(context.Context) error   { return nil }
func (l *lagging) Rollback(context.Context) error { return nil }
func (l *lagging) Native() *sql.Tx                { return nil }

// A schema transaction behind vtgate tries a statement again while vtgate
// plans on a VSchema that lacks its table, and only then; every other
// error is returned at once.
func TestSchemaTxWaitsOutVSchemaLag(t *testing.T) {
	other := &mysqldriver.MySQLError{Number: 1105, Message: "keyspace idem not found in vschema"}
	for _, tc := range []struct {
		name      string
		refusals  int
		err       error
		wantTries int
	}{
		{"lagging twice", 2, nil, 3},
		{"not lagging", 0, nil, 1},
		{"another error", 0, other, 1},
		{"lagging, then another error", 1, other, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, stmt := range []string{"Exec", "Query"} {
				l := &lagging{refusals: tc.refusals, err: tc.err}
				tx := vschemaLagTx{l, vschemaLagBound}
				var err error
				if stmt == "Exec" {
					_, err = tx.Exec(t.Context(), "INSERT IGNORE INTO idem_fence (id, max_deleted_token) VALUES (1, 0)")
				} else {
					var rows dialect.Rows
					if rows, err = tx.Query(t.Context(), "SELECT version FROM idem_schema"); err == nil {
						_ = rows.Close()
					}
				}
				if !errors.Is(err, tc.err) || (tc.err == nil) != (err == nil) {
					t.Errorf("%s: %v, want %v", stmt, err, tc.err)
				}
				if l.tries != tc.wantTries {
					t.Errorf("%s: tried %d times, want %d", stmt, l.tries, tc.wantTries)
				}
			}
		})
	}
}

// The tries end with the caller's context, the refusal kept.
func TestSchemaTxLagEndsWithContext(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	l := &lagging{refusals: 1 << 30}
	_, err := vschemaLagTx{l, vschemaLagBound}.Exec(ctx, "CREATE TABLE t (k INT)")
	if !errors.Is(err, context.Canceled) || !tableNotPlanned(err) {
		t.Fatalf("Exec after the context ended: %v, want the refusal and context.Canceled", err)
	}
	if l.tries != 1 {
		t.Fatalf("tried %d times after the context ended, want 1", l.tries)
	}
}

// The tries end at their bound, the refusal kept.
func TestSchemaTxLagBounded(t *testing.T) {
	l := &lagging{refusals: 1 << 30}
	start := time.Now()
	_, err := vschemaLagTx{l, 100 * time.Millisecond}.Exec(t.Context(), "CREATE TABLE t (k INT)")
	if !tableNotPlanned(err) || !strings.Contains(err.Error(), "for 100ms") {
		t.Fatalf("Exec while the VSchema lags past the bound: %v, want the refusal, naming the bound", err)
	}
	if l.tries < 2 || time.Since(start) > 5*time.Second {
		t.Fatalf("%d tries in %v, want several within the bound", l.tries, time.Since(start))
	}
}
