package postgres_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/dialect"
	"github.com/idemkit/idem/integration/containers"
	"github.com/idemkit/idem/postgres"
)

// heldDB returns the shared *sql.DB whose connections hold BEGIN back.
func heldDB(t *testing.T) *sql.DB {
	t.Helper()
	connect(t)
	return server.held
}

// TestConformanceHoldBegin runs the whole suite, the model-based tests
// included, on database/sql through postgres.HoldBegin.
func TestConformanceHoldBegin(t *testing.T) {
	conformanceSQL(t, "postgres/database-sql-hold-begin", heldDB, func(pool *pgxpool.Pool) *sql.DB {
		return sql.OpenDB(postgres.HoldBegin(stdlib.GetPoolConnector(pool)))
	})
}

// tripCounter counts round trips on the connections it dials: a write
// after a read starts one (a pipeline's messages count once).
type tripCounter struct{ trips atomic.Int64 }

type tripConn struct {
	net.Conn
	c        *tripCounter
	readLast atomic.Bool
}

func (c *tripConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if n > 0 {
		c.readLast.Store(true)
	}
	return n, err
}

func (c *tripConn) Write(b []byte) (int, error) {
	if c.readLast.Swap(false) {
		c.c.trips.Add(1)
	}
	return c.Conn.Write(b)
}

// countedDB opens a *sql.DB of one connection on the test server whose
// round trips c counts, through HoldBegin when held is set.
func countedDB(t *testing.T, c *tripCounter, held bool) *sql.DB {
	t.Helper()
	cc, err := pgx.ParseConfig(containers.Postgres(t))
	if err != nil {
		t.Fatal(err)
	}
	var dialer net.Dialer
	cc.TLSConfig = nil
	cc.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := dialer.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &tripConn{Conn: conn, c: c}, nil
	}
	connector := stdlib.GetConnector(*cc)
	if held {
		connector = postgres.HoldBegin(connector)
	}
	db := sql.OpenDB(connector)
	t.Cleanup(func() { db.Close() })
	db.SetMaxOpenConns(1)
	db.SetMaxIdleConns(1)
	if err := db.PingContext(t.Context()); err != nil {
		t.Fatal(err)
	}
	return db
}

// randomName is a table name of its own for a test.
func randomName(prefix string) string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// TestHoldBeginRoundTrips: on a plain *sql.DB a request idem wins costs 5
// round trips (BEGIN, claim, the caller's statement, completion, COMMIT)
// and BeginTx one by itself; through HoldBegin BeginTx costs none and the
// request 3, as on the pgx Driver (BEGIN+claim, the caller's statement,
// completion+COMMIT).
func TestHoldBeginRoundTrips(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, tc := range []struct {
		name                        string
		held                        bool
		beginRTs, wonRTs, replayRTs int64
	}{
		{"stdlib", false, 1, 5, 4},
		{"hold-begin", true, 0, 3, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &tripCounter{}
			db := countedDB(t, c, tc.held)
			conn, err := db.Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			before := c.trips.Load()
			tx, err := conn.BeginTx(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			if got := c.trips.Load() - before; got != tc.beginRTs {
				t.Errorf("BeginTx alone: %d round trips, want %d", got, tc.beginRTs)
			}
			if err := tx.Rollback(); err != nil {
				t.Fatal(err)
			}
			conn.Close()

			d, err := postgres.NewSQL(ctx, db, postgres.Options{})
			if err != nil {
				t.Fatal(err)
			}
			table := randomName("idemrt_")
			store, err := idem.New(d, idem.Config{Table: table})
			if err != nil {
				t.Fatal(err)
			}
			if err := store.Migrate(ctx); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				_, _ = db.ExecContext(context.Background(), `DROP TABLE IF EXISTS "`+table+`", "`+table+`_schema", "`+table+`_fence"`)
			})
			do := func(key string) (idem.Outcome, int64) {
				t.Helper()
				before := c.trips.Load()
				res, err := store.Do(ctx, idem.Request{Scope: "rt", Key: key, Fingerprint: idem.FingerprintRequest("POST", "/rt", nil)}, func(ctx context.Context, tx *sql.Tx) (idem.Response, error) {
					_, err := tx.ExecContext(ctx, `SELECT 1`)
					return idem.Response{Status: 201}, err
				})
				if err != nil {
					t.Fatal(err)
				}
				return res.Outcome, c.trips.Load() - before
			}
			// pgx prepares each statement in a round trip of its own, on its
			// first use on the connection.
			do("warm")
			do("warm")
			if out, rts := do("k"); out != idem.Won || rts != tc.wonRTs {
				t.Errorf("won request: %v in %d round trips, want won in %d", out, rts, tc.wonRTs)
			}
			if out, rts := do("k"); out != idem.Replay || rts != tc.replayRTs {
				t.Errorf("replay: %v in %d round trips, want replay in %d", out, rts, tc.replayRTs)
			}
		})
	}
}

// TestHoldBeginSemantics checks, on a real server, each thing HoldBegin's
// documentation says changes for code on that *sql.DB.
func TestHoldBeginSemantics(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool, _ := connect(t)
	c := &tripCounter{}
	db := countedDB(t, c, true)
	table := randomName("idemhold_")
	if _, err := pool.Exec(ctx, `CREATE TABLE `+table+` (v int)`); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = pool.Exec(context.Background(), `DROP TABLE `+table) })
	// rows returns the table's committed values and empties it.
	rows := func(t *testing.T) []int {
		t.Helper()
		var vs []int
		if err := pool.QueryRow(ctx, `WITH d AS (DELETE FROM `+table+` RETURNING v) SELECT coalesce(array_agg(v ORDER BY v), '{}') FROM d`).Scan(&vs); err != nil {
			t.Fatal(err)
		}
		return vs
	}
	trips := func(fn func()) int64 {
		before := c.trips.Load()
		fn()
		return c.trips.Load() - before
	}
	must := func(t *testing.T, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	d, err := postgres.NewSQL(ctx, db, postgres.Options{})
	must(t, err)

	t.Run("a transaction that runs nothing sends nothing", func(t *testing.T) {
		for _, end := range []func(*sql.Tx) error{(*sql.Tx).Commit, (*sql.Tx).Rollback} {
			if n := trips(func() {
				tx, err := db.BeginTx(ctx, nil)
				must(t, err)
				must(t, end(tx))
			}); n != 0 {
				t.Errorf("BeginTx and its end: %d round trips, want 0", n)
			}
		}
	})

	t.Run("BEGIN goes before the first statement, at BeginTx's options", func(t *testing.T) {
		tx, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelSerializable})
		must(t, err)
		defer tx.Rollback()
		var level string
		must(t, tx.QueryRowContext(ctx, `SHOW transaction_isolation`).Scan(&level))
		if level != "serializable" {
			t.Errorf("the transaction runs at %q, want serializable", level)
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO `+table+` VALUES (1)`)
		must(t, err)
		must(t, tx.Rollback())
		if got := rows(t); len(got) != 0 {
			t.Errorf("rolled back, yet %v committed", got)
		}
		tx, err = db.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
		must(t, err)
		_, err = tx.ExecContext(ctx, `INSERT INTO `+table+` VALUES (1)`)
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || pe.Code != "25006" {
			t.Errorf("INSERT in a read-only transaction: %v, want 25006", err)
		}
		must(t, tx.Rollback())
	})

	t.Run("a level pgx refuses is refused by BeginTx", func(t *testing.T) {
		if _, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelLinearizable}); err == nil {
			t.Error("BeginTx at LINEARIZABLE succeeded")
		}
	})

	t.Run("an error from BEGIN surfaces at the first statement", func(t *testing.T) {
		conn, err := db.Conn(ctx)
		must(t, err)
		defer conn.Close()
		// Leave the session in a failed transaction behind database/sql's
		// back, so that BEGIN fails (25P02) on a live connection.
		must(t, conn.Raw(func(dc any) error {
			pc := dc.(interface{ Conn() *pgx.Conn }).Conn()
			_, _ = pc.Exec(ctx, `BEGIN`)
			_, _ = pc.Exec(ctx, `SELECT 1/0`)
			return nil
		}))
		tx, err := conn.BeginTx(ctx, nil)
		if err != nil {
			t.Fatalf("BeginTx = %v, want nil (it sends nothing)", err)
		}
		defer tx.Rollback()
		_, err = tx.ExecContext(ctx, `INSERT INTO `+table+` VALUES (1)`)
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || pe.Code != "25P02" {
			t.Errorf("first statement: %v, want BEGIN's 25P02", err)
		}
		// Nothing runs outside the transaction after it.
		if _, err := tx.ExecContext(ctx, `SELECT 1`); !errors.Is(err, dialect.ErrTxDone) {
			t.Errorf("statement after a failed BEGIN: %v, want ErrTxDone", err)
		}
		if err := tx.Commit(); !errors.Is(err, dialect.ErrTxDone) {
			t.Errorf("Commit after a failed BEGIN: %v, want ErrTxDone", err)
		}
	})

	t.Run("a held statement runs at Commit, in its round trip", func(t *testing.T) {
		for i := range 2 {
			tx, err := d.Begin(ctx, dialect.BeginOptions{})
			must(t, err)
			defer tx.Rollback(ctx) // after Commit it does nothing
			if dialect.DeferToCommit(tx, dialect.Statement{SQL: `SELECT 1`}) {
				t.Error("DeferToCommit before BEGIN was sent: held")
			}
			must(t, dialect.Pipeline(ctx, tx, dialect.Statement{SQL: `INSERT INTO ` + table + ` VALUES (1)`}))
			if !dialect.DeferToCommit(tx, dialect.Statement{SQL: `UPDATE ` + table + ` SET v = v + 10`}) {
				t.Fatal("DeferToCommit declined")
			}
			// A statement sent before Commit runs after the held one.
			_, err = tx.Native().ExecContext(ctx, `UPDATE `+table+` SET v = v * 2`)
			must(t, err)
			must(t, dialect.Pipeline(ctx, tx, dialect.Statement{SQL: `SELECT 1`}))
			if !dialect.DeferToCommit(tx, dialect.Statement{SQL: `UPDATE ` + table + ` SET v = v + 10`}) {
				t.Fatal("DeferToCommit declined")
			}
			// pgx prepares a statement in a round trip of its own on its first
			// use on the connection: the second time counts.
			if n := trips(func() { must(t, tx.Commit(ctx)) }); i == 1 && n != 1 {
				t.Errorf("Commit with a held statement: %d round trips, want 1", n)
			}
			if got := rows(t); len(got) != 1 || got[0] != 32 {
				t.Errorf("committed %v, want [32] ((1+10)*2+10)", got)
			}
		}
		// A held statement that fails stops COMMIT; the guarded
		// completion's division by zero is ErrNotClaimed.
		tx, err := d.Begin(ctx, dialect.BeginOptions{})
		must(t, err)
		defer tx.Rollback(ctx)
		must(t, dialect.Pipeline(ctx, tx, dialect.Statement{SQL: `INSERT INTO ` + table + ` VALUES (5)`}))
		if !dialect.DeferToCommit(tx, dialect.Statement{SQL: `SELECT 1/0`}) {
			t.Fatal("DeferToCommit declined")
		}
		err = tx.Commit(ctx)
		if !errors.Is(err, dialect.ErrNotClaimed) || errors.Is(err, dialect.ErrCommitUnknown) {
			t.Errorf("Commit with a failing held statement: %v, want ErrNotClaimed", err)
		}
		if got := rows(t); len(got) != 0 {
			t.Errorf("the failed transaction committed %v", got)
		}
	})

	t.Run("Raw hands out no *stdlib.Conn; its Conn sends BEGIN first", func(t *testing.T) {
		conn, err := db.Conn(ctx)
		must(t, err)
		defer conn.Close()
		tx, err := conn.BeginTx(ctx, nil)
		must(t, err)
		defer tx.Rollback()
		must(t, conn.Raw(func(dc any) error {
			if _, ok := dc.(*stdlib.Conn); ok {
				t.Error("Raw handed out a *stdlib.Conn")
			}
			pc := dc.(interface{ Conn() *pgx.Conn }).Conn()
			if s := pc.PgConn().TxStatus(); s != 'T' {
				t.Errorf("the *pgx.Conn of a transaction: status %q, want T", s)
			}
			_, err := pc.Exec(ctx, `INSERT INTO `+table+` VALUES (7)`)
			return err
		}))
		must(t, tx.Rollback())
		if got := rows(t); len(got) != 0 {
			t.Errorf("the statement on the *pgx.Conn ran outside the transaction: %v committed", got)
		}
	})

	t.Run("prepared statements run inside the transaction", func(t *testing.T) {
		// Prepared on the *sql.DB, the statement is prepared on its one
		// connection, outside any transaction, and sql.Tx.Stmt reuses it.
		outside, err := db.PrepareContext(ctx, `INSERT INTO `+table+` VALUES ($1)`)
		must(t, err)
		defer outside.Close()
		tx, err := db.BeginTx(ctx, nil)
		must(t, err)
		defer tx.Rollback()
		_, err = tx.StmtContext(ctx, outside).ExecContext(ctx, 8)
		must(t, err)
		inside, err := tx.PrepareContext(ctx, `INSERT INTO `+table+` VALUES ($1)`)
		must(t, err)
		_, err = inside.ExecContext(ctx, 9)
		must(t, err)
		must(t, tx.Rollback())
		if got := rows(t); len(got) != 0 {
			t.Errorf("prepared statements ran outside the transaction: %v committed", got)
		}
	})
}
