package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	mysqldriver "github.com/go-sql-driver/mysql"

	"github.com/idemkit/idem/dialect"
)

// An ALTER VSCHEMA reaches the planner of the vtgate that ran it at once,
// but that vtgate may then, for a moment, plan with an older VSchema: the
// topology watch can deliver the event of an earlier change after it, and
// a rebuild started by the schema tracker can store a VSchema it read
// before the change (Vitess 24, go/vt/vtgate/vschema_manager.go). A
// statement planned meanwhile on a table the change added is refused
// before it reaches any shard: 1105, "table … not found". Seen in CI on
// the INSERT of Migrate's third migration, right after Prepare routed the
// fence table.
//
// So behind vtgate a schema transaction (Migrate's) tries such a statement
// again, for up to vschemaLagBound: vtgate refused it while planning, so
// nothing of it ran.

// vschemaLagBound bounds the tries of one statement.
const vschemaLagBound = 30 * time.Second

// vschemaLagTx is a schema transaction behind vtgate, whose statements are
// tried for up to bound (vschemaLagBound).
type vschemaLagTx struct {
	dialect.Tx[*sql.Tx]
	bound time.Duration
}

func (t vschemaLagTx) Exec(ctx context.Context, query string, args ...any) (n int64, err error) {
	err = whileVSchemaLags(ctx, t.bound, func() error {
		n, err = t.Tx.Exec(ctx, query, args...)
		return err
	})
	return n, err
}

func (t vschemaLagTx) Query(ctx context.Context, query string, args ...any) (rows dialect.Rows, err error) {
	err = whileVSchemaLags(ctx, t.bound, func() error {
		rows, err = t.Tx.Query(ctx, query, args...)
		return err
	})
	return rows, err
}

// whileVSchemaLags runs try until it succeeds or fails otherwise than by
// tableNotPlanned, for up to bound.
func whileVSchemaLags(ctx context.Context, bound time.Duration, try func() error) error {
	deadline := time.Now().Add(bound)
	for pause := 10 * time.Millisecond; ; pause = min(2*pause, 250*time.Millisecond) {
		err := try()
		if !tableNotPlanned(err) {
			return err
		}
		if time.Now().Add(pause).After(deadline) {
			return fmt.Errorf("mysql: vtgate's VSchema lacked the table for %s: %w", bound, err)
		}
		select {
		case <-ctx.Done():
			return errors.Join(err, ctx.Err())
		case <-time.After(pause):
		}
	}
}

// tableNotPlanned reports vtgate's refusal to plan a statement on a table
// its VSchema lacks (vindexes.NotFoundError).
func tableNotPlanned(err error) bool {
	var me *mysqldriver.MySQLError
	return errors.As(err, &me) && me.Number == erUnknownError &&
		strings.HasPrefix(me.Message, "table ") && strings.HasSuffix(me.Message, " not found")
}
