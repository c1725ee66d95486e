package main

import (
	"context"
	"database/sql"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/dialect"
	"github.com/idemkit/idem/idemqueue"
)

// target is one backend under test: the ways of sending the write (its
// schemes: bare, floor, seed and idem), and what the report needs to know
// about the database.
type target struct {
	name string // "postgres/pgx"
	// backend is the -backends name that made it ("pgx", "mysql+delay").
	backend string
	server  string // version and durability settings
	wire    *wireStats
	// serverCPU reads the database's CPU time (nil when unknown; SQLite's
	// is the process's).
	serverCPU func() time.Duration
	keys      string // the idem table
	orders    string // the user's table
	// db is the pool of a target on database/sql (nil on pgx).
	db *sql.DB

	// schemes are the ways this target sends a request, by name (the
	// scheme* constants).
	schemes map[string]scheme
	// storm runs the takeover storm (nil without lease mode); consume
	// handles a delivery through idemqueue with the order's insert.
	storm   func(ctx context.Context, ks keySpace, n int) (op, []atomic.Int32, error)
	consume func(ctx context.Context, d idemqueue.Delivery) (idem.Outcome, error)
	// batch runs Store.DoBatch with the orders' multi-row insert.
	batch batchScheme
	// purge runs Store.Purge with Config.PurgeDutyCycle set to duty.
	purge func(ctx context.Context, duty float64) (idem.PurgeResult, error)
	// settle lets the database finish the background work a bulk load
	// leaves (vacuum, checkpoint, page flushing) on a table.
	settle func(ctx context.Context, table string) error
	// fillSQL inserts records in bulk (see fill).
	fillSQL string
	// size weighs a table and its indexes.
	size func(ctx context.Context, table string) (relSize, error)

	// writes reads the server's write counters, with the row counts of
	// the tables named (nil: no writes probe); writesReset, when set, runs
	// before a probe (SQLite: empties the WAL, whose frames it counts).
	writes      func(ctx context.Context, tables ...string) (writeCounts, error)
	writesReset func(ctx context.Context) error

	// storeOn returns Store.Do on a store of its own on table (migrated),
	// for the scale test.
	storeOn func(ctx context.Context, table string) (scheme, error)
	// exec runs one statement outside a transaction.
	exec execFunc
	// drop drops tables.
	drop func(ctx context.Context, tables ...string) error
	// ping sends one trivial statement (one round trip); nil for SQLite.
	ping  func(ctx context.Context) error
	close func()
}

// relSize is the size of one table and its indexes.
type relSize struct {
	rows       int64
	tableBytes int64
	indexBytes int64
}

// The user's write: one order row, as in the seed.
const (
	customer = 4711
	itemID   = 88
)

// response is what the order endpoint answers and idem stores.
func response(n int64) idem.Response {
	return idem.Response{
		Status: http.StatusCreated,
		Header: http.Header{"Content-Type": {"application/json"}, "Location": {fmt.Sprintf("/orders/%d", n)}},
		Body:   fmt.Appendf(nil, `{"order":%d,"customer":%d,"item":%d,"status":"created"}`, n, customer, itemID),
	}
}

// requestBody is the body of request n; its fingerprint decides replay or
// mismatch.
func requestBody(n int64, variant string) []byte {
	return fmt.Appendf(nil, `{"customer":%d,"item":%d,"n":%d%s}`, customer, itemID, n, variant)
}

// doOn returns Store.Do of store as a scheme: the user's write (insert) and
// the order's response.
func doOn[TTx any](store *idem.Store[TTx], insert func(ctx context.Context, tx TTx) error) scheme {
	return func(ctx context.Context, req idem.Request, n int64) (idem.Outcome, error) {
		res, err := store.Do(ctx, req, func(ctx context.Context, tx TTx) (idem.Response, error) {
			if err := insert(ctx, tx); err != nil {
				return idem.Response{}, err
			}
			return response(n), nil
		})
		return res.Outcome, err
	}
}

// storeOps adds the idem schemes of a target on a driver of any
// transaction type; insert is the user's write in that type, insertMany
// the same write of rows orders in one statement.
func storeOps[TTx any](t *target, drv dialect.Driver[TTx], insert func(ctx context.Context, tx TTx) error,
	insertMany func(ctx context.Context, tx TTx, rows int) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	store, err := idem.New(drv, idem.Config{Table: t.keys})
	if err != nil {
		return err
	}
	if err := store.Migrate(ctx); err != nil {
		return err
	}
	readFirst, err := idem.New(drv, idem.Config{Table: t.keys, ReadFirst: idem.ReadFirstAlways})
	if err != nil {
		return err
	}
	claimOnly, err := idem.New(drv, idem.Config{Table: t.keys, ReadFirst: idem.ReadFirstNever})
	if err != nil {
		return err
	}
	t.schemes[schemeIdem], t.schemes[schemeReadFirst], t.schemes[schemeClaimOnly] = doOn(store, insert), doOn(readFirst, insert), doOn(claimOnly, insert)
	t.schemes[schemeIdemCall], t.consume = doOn(store, withCall(insert, providerDelay)), queueOn(store, insert)
	t.batch = batchOn(store, insertMany)
	if _, ok := drv.Dialect().(dialect.Leaser); ok {
		t.schemes[schemeLease], t.schemes[schemeLeaseCall] = leaseOn(store, insert, 0), leaseOn(store, insert, providerDelay)
		t.storm = stormOn(drv, t.keys, insert)
	}
	// The two purge modes are Store.Purge on stores that differ only in
	// Config.PurgeDutyCycle: back to back (1), and paced (duty).
	t.purge = func(ctx context.Context, duty float64) (idem.PurgeResult, error) {
		cfg := store.Config()
		cfg.PurgeDutyCycle = duty
		s, err := idem.New(drv, cfg)
		if err != nil {
			return idem.PurgeResult{}, err
		}
		return s.Purge(ctx)
	}
	t.storeOn = func(ctx context.Context, table string) (scheme, error) {
		s, err := idem.New(drv, idem.Config{Table: table})
		if err != nil {
			return nil, err
		}
		if err := s.Migrate(ctx); err != nil {
			return nil, err
		}
		return doOn(s, insert), nil
	}
	return nil
}

// execFunc runs one statement outside a transaction.
type execFunc func(ctx context.Context, query string, args ...any) error

// newTarget is a target whose tables are named by prefix, on a database
// whose statements outside transactions run through exec: it creates the
// user's order table (ordersDDL, formatted with its name) afresh, sets
// drop, ping, exec and fillSQL, and its close drops what the run made before
// it calls release. On an error it calls release.
func newTarget(name, prefix string, w *wireStats, exec execFunc, ordersDDL, fillSQL string, release func()) (*target, error) {
	keys, orders := prefix+"_keys", prefix+"_orders"
	t := &target{name: name, wire: w, keys: keys, orders: orders, schemes: map[string]scheme{},
		exec: exec, fillSQL: fillSQL}
	t.drop = func(ctx context.Context, tables ...string) error {
		for _, tbl := range tables {
			for _, name := range []string{tbl, tbl + "_schema", tbl + "_fence"} {
				if err := exec(ctx, "DROP TABLE IF EXISTS "+name); err != nil {
					return err
				}
			}
		}
		return nil
	}
	t.ping = func(ctx context.Context) error { return exec(ctx, "SELECT 1") }
	t.close = func() {
		// A server from a DSN outlives the run: leave it as it was.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = t.drop(ctx, keys, orders)
		release()
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := t.drop(ctx, keys, orders); err != nil {
		release()
		return nil, err
	}
	if err := exec(ctx, fmt.Sprintf(ordersDDL, orders)); err != nil {
		release()
		return nil, err
	}
	return t, nil
}

// fill inserts records 1 to n of scope into table on the server, 100,000
// to a statement (INSERT ... SELECT over a series of numbers), calling
// progress after each statement. The keys are spread evenly over the key
// space in ascending order, so that claims of random keys land between
// them; every record holds an order's response and expires a day from now
// (live) or expired a day ago.
func (t *target) fill(ctx context.Context, table, scope string, n int64, live bool, progress func(done int64)) error {
	expires := -86400
	if live {
		expires = 86400
	}
	resp := response(0)
	_, bodyTail, _ := strings.Cut(string(resp.Body), ",")
	// fillSQL's verbs: table, scope, the keys' step, the expiry in seconds
	// from now, the stored header, and the body after the order number.
	q := fmt.Sprintf(t.fillSQL, table, scope, (int64(1)<<48)/(n+1), expires, encodeHeader(resp.Header), ","+bodyTail)
	const chunk = 100_000
	for from := int64(1); from <= n; from += chunk {
		to := min(from+chunk-1, n)
		if err := t.exec(ctx, q, from, to); err != nil {
			return err
		}
		progress(to)
	}
	return nil
}
