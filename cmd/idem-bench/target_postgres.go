package main

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/dialect"
	"github.com/idemkit/idem/postgres"
)

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

func postgresSizes(query func(ctx context.Context, sql string, args ...any) pgx.Row) func(ctx context.Context, tables ...string) ([]relSize, error) {
	return func(ctx context.Context, tables ...string) ([]relSize, error) {
		var out []relSize
		for _, t := range tables {
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
func postgresSettle(exec func(ctx context.Context, s string) error) func(ctx context.Context, table string) error {
	return func(ctx context.Context, table string) error {
		// PARALLEL 0: a parallel vacuum keeps dead tuples in dynamic shared
		// memory, more than a container's default 64 MB /dev/shm.
		if err := exec(ctx, `VACUUM (ANALYZE, PARALLEL 0) `+table); err != nil {
			return err
		}
		return exec(ctx, `CHECKPOINT`)
	}
}

// postgresFill inserts expired records the way the dialect stores them.
const postgresFill = `INSERT INTO %s (scope, idem_key, fingerprint, status, header, body, created_at, expires_at)
SELECT 'purge', 'p-' || g, sha256(g::text::bytea), 201, '\x'::bytea, convert_to('{"order":' || g || '}', 'UTF8'),
	now() - interval '2 days', now() - interval '1 day'
FROM generate_series($1::bigint, $2::bigint) g`

func pgxPoolConfig(dsn string, w *wireStats, conns int, via *delayProxy) (*pgxpool.Config, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = int32(conns)
	// No health-check ping on acquire, so round trips are the statements'.
	cfg.ShouldPing = func(context.Context, pgxpool.ShouldPingParams) bool { return false }
	cfg.ConnConfig.DialFunc = countingDialer(w, func() protocol { return &pgProtocol{} }, via)
	return cfg, nil
}

func newPgxTarget(dsn, prefix string, conns int, via *delayProxy) (*target, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	w := &wireStats{}
	cfg, err := pgxPoolConfig(dsn, w, conns, via)
	if err != nil {
		return nil, err
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	keys, orders := tableNames(prefix)
	t := &target{name: "postgres/pgx", family: "postgres", wire: w, onWire: true, keys: keys, orders: orders,
		server: postgresServerInfo(ctx, pool), schemes: map[string]scheme{}}
	exec := func(ctx context.Context, s string) error { _, err := pool.Exec(ctx, s); return err }
	t.close = func() { dropTables(exec, keys, orders, keys+"_schema", keys+"_fence"); pool.Close() }
	t.drop = dropper(exec)
	t.ping = func(ctx context.Context) error { return exec(ctx, "SELECT 1") }
	if err := postgresSchema(ctx, exec, keys, orders); err != nil {
		pool.Close()
		return nil, err
	}
	insertSQL := `INSERT INTO ` + orders + ` (customer, item_id) VALUES ($1, $2)`
	t.schemes[schemeBare] = func(ctx context.Context, _ idem.Request, _ int64) (idem.Outcome, error) {
		tx, err := pool.Begin(ctx)
		if err != nil {
			return 0, err
		}
		defer tx.Rollback(context.WithoutCancel(ctx))
		if _, err := tx.Exec(ctx, insertSQL, customer, itemID); err != nil {
			return 0, err
		}
		return idem.Won, tx.Commit(ctx)
	}
	s := newSeedSQL("postgres", keys)
	t.schemes[schemeFloor] = pgxFloor(pool, s, insertSQL, true)
	t.schemes[schemeFloorPlain] = pgxFloor(pool, s, insertSQL, false)
	t.schemes[schemeSeed] = pgxSeed(pool, s, insertSQL, true)
	t.schemes[schemeSeedPlain] = pgxSeed(pool, s, insertSQL, false)
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
	t.sizes = postgresSizes(pool.QueryRow)
	t.settle = postgresSettle(exec)
	t.fillExpired = func(ctx context.Context, rows int) error {
		return fillChunks(ctx, rows, func(ctx context.Context, from, to int64) error {
			_, err := pool.Exec(ctx, fmt.Sprintf(postgresFill, keys), from, to)
			return err
		})
	}
	t.bulkLoad = func(ctx context.Context, table string, n int64, progress func(int64)) error {
		return postgresCopy(ctx, pool, table, n, progress)
	}
	return t, nil
}

// postgresCopy loads n completed records into table with COPY, a million
// rows per statement.
func postgresCopy(ctx context.Context, pool *pgxpool.Pool, table string, n int64, progress func(int64)) error {
	const chunk = 1_000_000
	cols := []string{"scope", "idem_key", "fingerprint", "status", "header", "body", "created_at", "expires_at"}
	now := time.Now()
	for from := int64(0); from < n; from += chunk {
		to := min(from+chunk, n)
		i := from
		var row scaleRow
		src := pgx.CopyFromFunc(func() ([]any, error) {
			if i >= to {
				return nil, nil
			}
			row.fill(i, n, now)
			i++
			return []any{row.scope, row.key, row.fingerprint[:], int16(row.status), row.header, row.body, row.created, row.expires}, nil
		})
		if _, err := pool.CopyFrom(ctx, pgx.Identifier{table}, cols, src); err != nil {
			return err
		}
		progress(to)
	}
	return nil
}

func newPgSQLTarget(dsn, prefix string, conns int, via *delayProxy, lazy bool) (*target, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	w := &wireStats{}
	cc, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	cc.DialFunc = countingDialer(w, func() protocol { return &pgProtocol{} }, via)
	name := "postgres/sql"
	var db *sql.DB
	if lazy {
		name = "postgres/sql-lazy"
		db = sql.OpenDB(newLazyConnector(*cc))
	} else {
		db = stdlib.OpenDB(*cc)
	}
	db.SetMaxOpenConns(conns)
	db.SetMaxIdleConns(conns)
	keys, orders := tableNames(prefix)
	t := &target{name: name, family: "postgres", wire: w, onWire: true, keys: keys, orders: orders, schemes: map[string]scheme{}, db: db}
	exec := sqlExec(db)
	t.close = func() { dropTables(exec, keys, orders, keys+"_schema", keys+"_fence"); db.Close() }
	t.drop = dropper(exec)
	t.ping = func(ctx context.Context) error { return exec(ctx, "SELECT 1") }
	if err := postgresSchema(ctx, exec, keys, orders); err != nil {
		db.Close()
		return nil, err
	}
	insertSQL := `INSERT INTO ` + orders + ` (customer, item_id) VALUES ($1, $2)`
	s := newSeedSQL("postgres", keys)
	// database/sql sends each statement alone, idem's included: the
	// floor and the seed have one style here.
	t.schemes[schemeBare] = sqlBare(db, insertSQL)
	t.schemes[schemeFloor] = sqlFloor(db, sqlStyle{}, s, insertSQL)
	t.schemes[schemeSeed] = sqlSeed(db, sqlStyle{}, s, insertSQL, nil)
	var drv dialect.Driver[*sql.Tx]
	if lazy {
		drv, err = newLazyDriver(db)
	} else {
		drv, err = postgres.NewSQL(ctx, db, postgres.Options{})
	}
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
	t.sizes = postgresSizes(row)
	t.settle = postgresSettle(exec)
	t.fillExpired = sqlFillExpired(db, fmt.Sprintf(postgresFill, keys))
	return t, nil
}

// queryRowFunc adapts a function to the QueryRow method postgresServerInfo
// calls.
type queryRowFunc func(ctx context.Context, s string, args ...any) pgx.Row

func (f queryRowFunc) QueryRow(ctx context.Context, s string, args ...any) pgx.Row {
	return f(ctx, s, args...)
}
