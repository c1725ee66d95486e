package main

import (
	"context"
	"database/sql"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	mysqldriver "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	sqlitedriver "modernc.org/sqlite"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/dialect"
	"github.com/idemkit/idem/mysql"
	"github.com/idemkit/idem/postgres"
	"github.com/idemkit/idem/sqlite"
)

// target is one backend under test: the bare write, the same write through
// idem, and what the report needs to know about the database.
type target struct {
	name   string // "postgres/pgx"
	family string // "postgres", "mysql", "sqlite"
	server string // version and durability settings
	wire   *wireStats
	// onWire is true when round trips are counted on a socket.
	onWire bool
	// serverCPU reads the database's CPU time (nil when unknown; SQLite's
	// is the process's).
	serverCPU func() time.Duration
	keys      string // the idem table
	orders    string // the user's table

	bare func(ctx context.Context, n int64) error
	// floor is the bare write plus a plain insert of the request's key
	// into the idem table: what recording a key costs before any of
	// idem's logic (no conflict handling, no wait bound, no response).
	floor func(ctx context.Context, req idem.Request) error
	do    func(ctx context.Context, req idem.Request, n int64) (idem.Outcome, error)
	// doReadFirst is do on a store with Config.ReadFirst.
	doReadFirst func(ctx context.Context, req idem.Request, n int64) (idem.Outcome, error)
	handler     http.Handler // nil when the middleware is not built in
	// purge runs Store.Purge with Config.PurgeDutyCycle set to duty.
	purge func(ctx context.Context, duty float64) (idem.PurgeResult, error)
	// settle lets the database finish the background work a bulk load
	// leaves (vacuum, checkpoint, page flushing).
	settle func(ctx context.Context) error
	// fillExpired inserts rows expired records in bulk, for the purge test.
	fillExpired func(ctx context.Context, rows int) error
	sizes       func(ctx context.Context) ([]relSize, error)
	close       func()
}

// relSize is the size of one table and its indexes.
type relSize struct {
	table      string
	rows       int64
	tableBytes int64
	indexBytes int64
	note       string
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

// storeOps builds the idem paths of a target on a driver of any transaction
// type; insert is the user's write in that type.
func storeOps[TTx any](t *target, drv dialect.Driver[TTx], insert func(ctx context.Context, tx TTx) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	store, err := idem.New(drv, idem.Config{Table: t.keys})
	if err != nil {
		return err
	}
	if err := store.Migrate(ctx); err != nil {
		return err
	}
	readFirst, err := idem.New(drv, idem.Config{Table: t.keys, ReadFirst: true})
	if err != nil {
		return err
	}
	doOn := func(store *idem.Store[TTx]) func(ctx context.Context, req idem.Request, n int64) (idem.Outcome, error) {
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
	t.do, t.doReadFirst = doOn(store), doOn(readFirst)
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
	t.handler, err = middleware(store, insert)
	return err
}

func tableNames(prefix string) (keys, orders string) {
	return prefix + "_keys", prefix + "_orders"
}

// --- PostgreSQL ---

func postgresServerInfo(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}) string {
	var version, fsync, syncCommit, fpw, buffers string
	err := q.QueryRow(ctx, `SELECT current_setting('server_version'), current_setting('fsync'),
		current_setting('synchronous_commit'), current_setting('full_page_writes'), current_setting('shared_buffers')`).Scan(&version, &fsync, &syncCommit, &fpw, &buffers)
	if err != nil {
		return "unknown: " + err.Error()
	}
	return fmt.Sprintf("PostgreSQL %s, fsync=%s, synchronous_commit=%s, full_page_writes=%s, shared_buffers=%s", version, fsync, syncCommit, fpw, buffers)
}

func postgresSchema(ctx context.Context, exec func(ctx context.Context, sql string) error, keys, orders string) error {
	for _, s := range []string{
		`DROP TABLE IF EXISTS ` + keys,
		`DROP TABLE IF EXISTS ` + orders,
		`CREATE TABLE ` + orders + ` (id bigserial PRIMARY KEY, customer bigint NOT NULL, item_id bigint NOT NULL,
			created_at timestamptz NOT NULL DEFAULT now())`,
	} {
		if err := exec(ctx, s); err != nil {
			return err
		}
	}
	return nil
}

func postgresSizes(query func(ctx context.Context, sql string, args ...any) pgx.Row, keys, orders string) func(ctx context.Context) ([]relSize, error) {
	return func(ctx context.Context) ([]relSize, error) {
		var out []relSize
		for _, t := range []string{keys, orders} {
			r := relSize{table: t}
			err := query(ctx, `SELECT pg_table_size($1::regclass), pg_indexes_size($1::regclass), (SELECT count(*) FROM `+t+`)`, t).
				Scan(&r.tableBytes, &r.indexBytes, &r.rows)
			if err != nil {
				return nil, err
			}
			var upd, hot int64
			if err := query(ctx, `SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relid = $1::regclass`, t).Scan(&upd, &hot); err == nil && upd > 0 {
				r.note = fmt.Sprintf("%.0f%% of %d updates HOT", 100*float64(hot)/float64(upd), upd)
			}
			out = append(out, r)
		}
		return out, nil
	}
}

// postgresSettle vacuums the table a bulk load filled and checkpoints, so
// the measurements after it do not pay for the load.
func postgresSettle(ctx context.Context, exec func(ctx context.Context, s string) error, table string) error {
	// PARALLEL 0: a parallel vacuum keeps dead tuples in dynamic shared
	// memory, more than a container's default 64 MB /dev/shm.
	if err := exec(ctx, `VACUUM (ANALYZE, PARALLEL 0) `+table); err != nil {
		return err
	}
	return exec(ctx, `CHECKPOINT`)
}

// postgresFloor records a key the plainest way, for the floor path.
const postgresFloor = `INSERT INTO %s (scope, idem_key, fingerprint, created_at, expires_at)
VALUES ($1, $2, $3, now(), now() + interval '1 day')`

// postgresFill inserts expired records the way the dialect stores them.
const postgresFill = `INSERT INTO %s (scope, idem_key, fingerprint, status, header, body, created_at, expires_at)
SELECT 'purge', 'p-' || g, sha256(g::text::bytea), 201, '\x'::bytea, convert_to('{"order":' || g || '}', 'UTF8'),
	now() - interval '2 days', now() - interval '1 day'
FROM generate_series($1::bigint, $2::bigint) g`

func pgxPoolConfig(dsn string, w *wireStats, conns int) (*pgxpool.Config, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = int32(conns)
	// No health-check ping on acquire, so round trips are the statements'.
	cfg.ShouldPing = func(context.Context, pgxpool.ShouldPingParams) bool { return false }
	cfg.ConnConfig.DialFunc = countingDialer(w, func() protocol { return &pgProtocol{} })
	return cfg, nil
}

func newPgxTarget(dsn string, conns int) (*target, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	w := &wireStats{}
	cfg, err := pgxPoolConfig(dsn, w, conns)
	if err != nil {
		return nil, err
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	keys, orders := tableNames("bench_pgx")
	t := &target{name: "postgres/pgx", family: "postgres", wire: w, onWire: true, keys: keys, orders: orders,
		server: postgresServerInfo(ctx, pool)}
	exec := func(ctx context.Context, s string) error { _, err := pool.Exec(ctx, s); return err }
	t.close = func() { dropTables(exec, keys, orders); pool.Close() }
	if err := postgresSchema(ctx, exec, keys, orders); err != nil {
		pool.Close()
		return nil, err
	}
	insertSQL := `INSERT INTO ` + orders + ` (customer, item_id) VALUES ($1, $2)`
	floorSQL := fmt.Sprintf(postgresFloor, keys)
	// write is the bare write, plus the floor's key insert when req is set.
	write := func(ctx context.Context, req *idem.Request) error {
		tx, err := pool.Begin(ctx)
		if err != nil {
			return err
		}
		defer tx.Rollback(context.WithoutCancel(ctx))
		if _, err := tx.Exec(ctx, insertSQL, customer, itemID); err != nil {
			return err
		}
		if req != nil {
			if _, err := tx.Exec(ctx, floorSQL, req.Scope, req.Key, req.Fingerprint[:]); err != nil {
				return err
			}
		}
		return tx.Commit(ctx)
	}
	t.bare = func(ctx context.Context, _ int64) error { return write(ctx, nil) }
	t.floor = func(ctx context.Context, req idem.Request) error { return write(ctx, &req) }
	drv, err := postgres.New(ctx, pool, postgres.Options{})
	if err != nil {
		pool.Close()
		return nil, err
	}
	if err := storeOps(t, drv, func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, insertSQL, customer, itemID)
		return err
	}); err != nil {
		pool.Close()
		return nil, err
	}
	t.sizes = postgresSizes(pool.QueryRow, keys, orders)
	t.settle = func(ctx context.Context) error { return postgresSettle(ctx, exec, keys) }
	t.fillExpired = func(ctx context.Context, rows int) error {
		return fillChunks(ctx, rows, func(ctx context.Context, from, to int64) error {
			_, err := pool.Exec(ctx, fmt.Sprintf(postgresFill, keys), from, to)
			return err
		})
	}
	return t, nil
}

// dropTables removes the benchmark's tables from a server that outlives it
// (one from a DSN), within a bound.
func dropTables(exec func(ctx context.Context, s string) error, tables ...string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, t := range tables {
		_ = exec(ctx, "DROP TABLE IF EXISTS "+t)
	}
}

func sqlExec(db *sql.DB) func(ctx context.Context, s string) error {
	return func(ctx context.Context, s string) error { _, err := db.ExecContext(ctx, s); return err }
}

// fillChunks calls fill for [1, rows] in chunks of 100,000.
func fillChunks(ctx context.Context, rows int, fill func(ctx context.Context, from, to int64) error) error {
	const chunk = 100_000
	for from := int64(1); from <= int64(rows); from += chunk {
		if err := fill(ctx, from, min(from+chunk-1, int64(rows))); err != nil {
			return err
		}
	}
	return nil
}

func newPgSQLTarget(dsn string, conns int) (*target, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	w := &wireStats{}
	cc, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	cc.DialFunc = countingDialer(w, func() protocol { return &pgProtocol{} })
	db := stdlib.OpenDB(*cc)
	db.SetMaxOpenConns(conns)
	db.SetMaxIdleConns(conns)
	keys, orders := tableNames("bench_pgsql")
	t := &target{name: "postgres/sql", family: "postgres", wire: w, onWire: true, keys: keys, orders: orders}
	t.close = func() { dropTables(sqlExec(db), keys, orders); db.Close() }
	if err := sqlTarget(ctx, t, db, `INSERT INTO `+orders+` (customer, item_id) VALUES ($1, $2)`, postgresFloor, func(ctx context.Context, s string) error {
		_, err := db.ExecContext(ctx, s)
		return err
	}, postgresSchema); err != nil {
		db.Close()
		return nil, err
	}
	drv, err := postgres.NewSQL(ctx, db, postgres.Options{})
	if err != nil {
		db.Close()
		return nil, err
	}
	if err := storeOps(t, drv, sqlInsert(t.orders, "$1, $2")); err != nil {
		db.Close()
		return nil, err
	}
	row := func(ctx context.Context, s string, args ...any) pgx.Row { return db.QueryRowContext(ctx, s, args...) }
	t.server = postgresServerInfo(ctx, queryRowFunc(row))
	t.sizes = postgresSizes(row, keys, orders)
	t.settle = func(ctx context.Context) error { return postgresSettle(ctx, sqlExec(db), keys) }
	t.fillExpired = sqlFillExpired(db, fmt.Sprintf(postgresFill, keys))
	return t, nil
}

// queryRowFunc adapts a function to the QueryRow method postgresServerInfo
// calls.
type queryRowFunc func(ctx context.Context, s string, args ...any) pgx.Row

func (f queryRowFunc) QueryRow(ctx context.Context, s string, args ...any) pgx.Row {
	return f(ctx, s, args...)
}

// sqlTarget sets up the bare write of a database/sql target.
func sqlTarget(ctx context.Context, t *target, db *sql.DB, insertSQL, floorSQL string,
	exec func(ctx context.Context, s string) error,
	schema func(ctx context.Context, exec func(ctx context.Context, s string) error, keys, orders string) error) error {
	if err := schema(ctx, exec, t.keys, t.orders); err != nil {
		return err
	}
	floorSQL = fmt.Sprintf(floorSQL, t.keys)
	// write is the bare write, plus the floor's key insert when req is set.
	write := func(ctx context.Context, req *idem.Request) error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		if _, err := tx.ExecContext(ctx, insertSQL, customer, itemID); err != nil {
			return err
		}
		if req != nil {
			if _, err := tx.ExecContext(ctx, floorSQL, req.Scope, req.Key, req.Fingerprint[:]); err != nil {
				return err
			}
		}
		return tx.Commit()
	}
	t.bare = func(ctx context.Context, _ int64) error { return write(ctx, nil) }
	t.floor = func(ctx context.Context, req idem.Request) error { return write(ctx, &req) }
	return nil
}

// sqlSizes reads the size of each table and its indexes with sizeQuery (one
// argument, the table name; two columns, table and index bytes), after
// running refresh (formatted with the table name) when it is not empty.
func sqlSizes(db *sql.DB, tables []string, refresh, sizeQuery string) func(ctx context.Context) ([]relSize, error) {
	return func(ctx context.Context) ([]relSize, error) {
		var out []relSize
		for _, tbl := range tables {
			if refresh != "" {
				if _, err := db.ExecContext(ctx, fmt.Sprintf(refresh, tbl)); err != nil {
					return nil, err
				}
			}
			r := relSize{table: tbl}
			err := db.QueryRowContext(ctx, sizeQuery, tbl).Scan(&r.tableBytes, &r.indexBytes)
			if err == nil {
				err = db.QueryRowContext(ctx, `SELECT COUNT(*) FROM `+tbl).Scan(&r.rows)
			}
			if err != nil {
				return nil, err
			}
			out = append(out, r)
		}
		return out, nil
	}
}

// sqlFillExpired runs fill (two arguments: the first and last row number)
// over the rows in chunks.
func sqlFillExpired(db *sql.DB, fill string) func(ctx context.Context, rows int) error {
	return func(ctx context.Context, rows int) error {
		return fillChunks(ctx, rows, func(ctx context.Context, from, to int64) error {
			_, err := db.ExecContext(ctx, fill, from, to)
			return err
		})
	}
}

func sqlInsert(orders, placeholders string) func(ctx context.Context, tx *sql.Tx) error {
	q := `INSERT INTO ` + orders + ` (customer, item_id) VALUES (` + placeholders + `)`
	return func(ctx context.Context, tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, q, customer, itemID)
		return err
	}
}

// --- MySQL and MariaDB ---

func mysqlSchema(ctx context.Context, exec func(ctx context.Context, s string) error, keys, orders string) error {
	for _, s := range []string{
		`DROP TABLE IF EXISTS ` + keys,
		`DROP TABLE IF EXISTS ` + orders,
		`CREATE TABLE ` + orders + ` (id BIGINT AUTO_INCREMENT PRIMARY KEY, customer BIGINT NOT NULL, item_id BIGINT NOT NULL,
			created_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)) ENGINE=InnoDB`,
	} {
		if err := exec(ctx, s); err != nil {
			return err
		}
	}
	return nil
}

// mysqlDigits is 0..9 as a derived table, crossed five times for 100,000
// rows per chunk.
const mysqlDigits = `(SELECT 0 d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4
	UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9)`

// mysqlFloor records a key the plainest way, for the floor path.
const mysqlFloor = `INSERT INTO %s (scope, idem_key, fingerprint, created_at, expires_at)
VALUES (?, ?, ?, UTC_TIMESTAMP(6), UTC_TIMESTAMP(6) + INTERVAL 1 DAY)`

const mysqlFill = `INSERT INTO %s (scope, idem_key, fingerprint, status, header, body, created_at, expires_at)
SELECT 'purge', CONCAT('p-', n), UNHEX(SHA2(n, 256)), 201, '', CONCAT('{"order":', n, '}'),
	UTC_TIMESTAMP(6) - INTERVAL 2 DAY, UTC_TIMESTAMP(6) - INTERVAL 1 DAY
FROM (SELECT ? + a.d + 10*b.d + 100*c.d + 1000*e.d + 10000*f.d AS n
	FROM ` + mysqlDigits + ` a, ` + mysqlDigits + ` b, ` + mysqlDigits + ` c, ` + mysqlDigits + ` e, ` + mysqlDigits + ` f) s
WHERE n <= ?`

func newMySQLTarget(dsn, params string, conns int) (*target, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if params != "" {
		sep := "?"
		if strings.Contains(dsn, "?") {
			sep = "&"
		}
		dsn += sep + params
	}
	cfg, err := mysqldriver.ParseDSN(dsn)
	if err != nil {
		return nil, err
	}
	w := &wireStats{}
	if cfg.TLS != nil {
		w.opaque.Store(true)
	}
	cfg.DialFunc = countingDialer(w, func() protocol { return &mysqlProtocol{} })
	conn, err := mysqldriver.NewConnector(cfg)
	if err != nil {
		return nil, err
	}
	db := sql.OpenDB(conn)
	db.SetMaxOpenConns(conns)
	db.SetMaxIdleConns(conns)
	var version, flush, logBin string
	var bufferPool int64
	if err := db.QueryRowContext(ctx, `SELECT VERSION(), @@innodb_flush_log_at_trx_commit, @@log_bin, @@innodb_buffer_pool_size`).Scan(&version, &flush, &logBin, &bufferPool); err != nil {
		db.Close()
		return nil, err
	}
	name := "mysql"
	if strings.Contains(strings.ToLower(version), "mariadb") {
		name = "mariadb"
	}
	if params != "" {
		name += "?" + params
	}
	keys, orders := tableNames("bench_mysql")
	t := &target{name: name, family: "mysql", wire: w, onWire: true, keys: keys, orders: orders,
		close:  func() { dropTables(sqlExec(db), keys, orders); db.Close() },
		server: fmt.Sprintf("%s %s, innodb_flush_log_at_trx_commit=%s, log_bin=%s, innodb_buffer_pool_size=%dM", name, version, flush, logBin, bufferPool>>20)}
	exec := func(ctx context.Context, s string) error { _, err := db.ExecContext(ctx, s); return err }
	if err := sqlTarget(ctx, t, db, `INSERT INTO `+orders+` (customer, item_id) VALUES (?, ?)`, mysqlFloor, exec, mysqlSchema); err != nil {
		db.Close()
		return nil, err
	}
	drv, err := mysql.New(ctx, db, mysql.Options{})
	if err != nil {
		db.Close()
		return nil, err
	}
	if err := storeOps(t, drv, sqlInsert(orders, "?, ?")); err != nil {
		db.Close()
		return nil, err
	}
	t.sizes = sqlSizes(db, []string{keys, orders}, `ANALYZE TABLE %s`, `SELECT data_length, index_length FROM information_schema.tables
		WHERE table_schema = DATABASE() AND table_name = ?`)
	t.fillExpired = sqlFillExpired(db, fmt.Sprintf(mysqlFill, keys))
	t.settle = func(ctx context.Context) error {
		if _, err := db.ExecContext(ctx, `ANALYZE TABLE `+keys); err != nil {
			return err
		}
		// InnoDB flushes and purges in the background; give it a moment.
		select {
		case <-time.After(10 * time.Second):
		case <-ctx.Done():
		}
		return ctx.Err()
	}
	return t, nil
}

// --- SQLite ---

func sqliteSchema(ctx context.Context, exec func(ctx context.Context, s string) error, keys, orders string) error {
	for _, s := range []string{
		`DROP TABLE IF EXISTS ` + keys,
		`DROP TABLE IF EXISTS ` + orders,
		`CREATE TABLE ` + orders + ` (id INTEGER PRIMARY KEY, customer INTEGER NOT NULL, item_id INTEGER NOT NULL,
			created_at INTEGER NOT NULL DEFAULT (unixepoch()))`,
	} {
		if err := exec(ctx, s); err != nil {
			return err
		}
	}
	return nil
}

// sqliteFloor records a key the plainest way, for the floor path.
const sqliteFloor = `INSERT INTO %s (scope, idem_key, fingerprint, created_at, expires_at)
VALUES (?, ?, ?, CAST(unixepoch('subsec') * 1000000 AS INTEGER), CAST((unixepoch('subsec') + 86400) * 1000000 AS INTEGER))`

const sqliteFill = `WITH RECURSIVE g(n) AS (SELECT ?1 UNION ALL SELECT n + 1 FROM g WHERE n < ?2)
INSERT INTO %s (scope, idem_key, fingerprint, status, header, body, created_at, expires_at)
SELECT 'purge', 'p-' || n, randomblob(32), 201, x'', '{"order":' || n || '}',
	CAST((unixepoch('subsec') - 172800) * 1000000 AS INTEGER), CAST((unixepoch('subsec') - 86400) * 1000000 AS INTEGER)
FROM g`

// newSQLiteTarget opens a database file in dir with the settings
// sqlite.Open applies, through a connector that counts statements.
func newSQLiteTarget(dir string, conns int) (*target, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	path := filepath.Join(dir, "bench.db")
	dsn := "file:" + path + "?_txlock=immediate&_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)&_pragma=foreign_keys(1)"
	base, err := sqlitedriver.NewConnector(dsn)
	if err != nil {
		return nil, err
	}
	w := &wireStats{}
	db := sql.OpenDB(countingConnector{Connector: base, stats: w})
	db.SetMaxOpenConns(conns)
	db.SetMaxIdleConns(conns)
	var version, journal string
	var synchronous int
	if err := db.QueryRowContext(ctx, `SELECT sqlite_version()`).Scan(&version); err != nil {
		db.Close()
		return nil, err
	}
	if err := db.QueryRowContext(ctx, `PRAGMA journal_mode`).Scan(&journal); err != nil {
		db.Close()
		return nil, err
	}
	if err := db.QueryRowContext(ctx, `PRAGMA synchronous`).Scan(&synchronous); err != nil {
		db.Close()
		return nil, err
	}
	keys, orders := tableNames("bench_sqlite")
	t := &target{name: "sqlite", family: "sqlite", wire: w, keys: keys, orders: orders,
		server: fmt.Sprintf("SQLite %s (modernc.org/sqlite), journal_mode=%s, synchronous=%d, %d connection(s), file in %s", version, journal, synchronous, conns, dir),
		close:  func() { db.Close(); _ = os.RemoveAll(dir) }}
	exec := func(ctx context.Context, s string) error { _, err := db.ExecContext(ctx, s); return err }
	if err := sqlTarget(ctx, t, db, `INSERT INTO `+orders+` (customer, item_id) VALUES (?, ?)`, sqliteFloor, exec, sqliteSchema); err != nil {
		db.Close()
		return nil, err
	}
	drv, err := sqlite.New(ctx, db, sqlite.Options{})
	if err != nil {
		db.Close()
		return nil, err
	}
	if err := storeOps(t, drv, sqlInsert(orders, "?, ?")); err != nil {
		db.Close()
		return nil, err
	}
	t.sizes = sqlSizes(db, []string{keys, orders}, "", `SELECT
		COALESCE((SELECT SUM(pgsize) FROM dbstat WHERE name = ?1), 0),
		COALESCE((SELECT SUM(pgsize) FROM dbstat WHERE name IN (SELECT name FROM sqlite_schema WHERE type = 'index' AND tbl_name = ?1)), 0)`)
	t.fillExpired = sqlFillExpired(db, fmt.Sprintf(sqliteFill, keys))
	t.settle = func(ctx context.Context) error {
		_, err := db.ExecContext(ctx, `PRAGMA wal_checkpoint(TRUNCATE)`)
		return err
	}
	return t, nil
}
