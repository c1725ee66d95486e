package main

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/idemkit/idem/dialect"
	"github.com/idemkit/idem/postgres"
)

// postgresOrders is the user's table.
const postgresOrders = `CREATE TABLE %s (id bigserial PRIMARY KEY, customer bigint NOT NULL, item_id bigint NOT NULL,
	created_at timestamptz NOT NULL DEFAULT now())`

// postgresFill inserts expired records the way the dialect stores them.
const postgresFill = `INSERT INTO %s (scope, idem_key, fingerprint, status, header, body, created_at, expires_at)
SELECT 'purge', 'p-' || g, sha256(g::text::bytea), 201, '\x'::bytea, convert_to('{"order":' || g || '}', 'UTF8'),
	now() - interval '2 days', now() - interval '1 day'
FROM generate_series($1::bigint, $2::bigint) g`

// postgresAdmin sets what every PostgreSQL target reads and does outside
// its requests: the server's settings, the sizes (with the share of HOT
// updates) and the settling after a bulk load (a vacuum and a checkpoint).
func postgresAdmin(ctx context.Context, t *target, exec execFunc, row func(ctx context.Context, s string, args ...any) pgx.Row) {
	var version, fsync, syncCommit, fpw, buffers string
	t.server = "unknown"
	if err := row(ctx, `SELECT current_setting('server_version'), current_setting('fsync'), current_setting('synchronous_commit'),
		current_setting('full_page_writes'), current_setting('shared_buffers')`).Scan(&version, &fsync, &syncCommit, &fpw, &buffers); err == nil {
		t.server = fmt.Sprintf("PostgreSQL %s, fsync=%s, synchronous_commit=%s, full_page_writes=%s, shared_buffers=%s", version, fsync, syncCommit, fpw, buffers)
	}
	t.sizes = func(ctx context.Context, tables ...string) ([]relSize, error) {
		var out []relSize
		for _, tbl := range tables {
			r := relSize{table: tbl}
			err := row(ctx, `SELECT pg_table_size($1::regclass), pg_indexes_size($1::regclass), (SELECT count(*) FROM `+tbl+`)`, tbl).
				Scan(&r.tableBytes, &r.indexBytes, &r.rows)
			if err != nil {
				return nil, err
			}
			var upd, hot int64
			if err := row(ctx, `SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relid = $1::regclass`, tbl).Scan(&upd, &hot); err == nil && upd > 0 {
				r.note = fmt.Sprintf("%.0f%% of %d updates HOT", 100*float64(hot)/float64(upd), upd)
			}
			out = append(out, r)
		}
		return out, nil
	}
	t.settle = func(ctx context.Context, table string) error {
		// PARALLEL 0: a parallel vacuum keeps dead tuples in dynamic shared
		// memory, more than a container's default 64 MB /dev/shm.
		if err := exec(ctx, `VACUUM (ANALYZE, PARALLEL 0) `+table); err != nil {
			return err
		}
		return exec(ctx, `CHECKPOINT`)
	}
}

func newPgxTarget(dsn, prefix string, conns int, via *delayProxy) (*target, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	w := &wireStats{}
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = int32(conns)
	// No health-check ping on acquire, so round trips are the statements'.
	cfg.ShouldPing = func(context.Context, pgxpool.ShouldPingParams) bool { return false }
	cfg.ConnConfig.DialFunc = countingDialer(w, func() protocol { return &pgProtocol{} }, via)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, err
	}
	exec := func(ctx context.Context, s string, args ...any) error {
		_, err := pool.Exec(ctx, s, args...)
		return err
	}
	t, err := newTarget("postgres/pgx", "postgres", prefix, w, exec, postgresOrders, postgresFill, pool.Close)
	if err != nil {
		return nil, err
	}
	postgresAdmin(ctx, t, exec, pool.QueryRow)
	insertSQL := `INSERT INTO ` + t.orders + ` (customer, item_id) VALUES ($1, $2)`
	insert := func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, insertSQL, customer, itemID)
		return err
	}
	drv, err := postgres.New(ctx, pool, postgres.Options{})
	if err == nil {
		// An application's pgx transaction sends BEGIN, each statement and
		// COMMIT alone, as a transaction of idem's driver does for the
		// user's write: one begin serves the bare write too.
		yardsticks[pgx.Tx]{plain: driverBegin(drv), idem: driverBegin(drv), write: insert, sql: newSeedSQL("postgres", t.keys)}.add(t)
		err = storeOps(t, drv, insert)
	}
	if err != nil {
		t.close()
		return nil, err
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
	name, db := "postgres/sql", stdlib.OpenDB(*cc)
	if lazy {
		name, db = "postgres/sql-lazy", sql.OpenDB(newLazyConnector(*cc))
	}
	db.SetMaxOpenConns(conns)
	db.SetMaxIdleConns(conns)
	t, err := newTarget(name, "postgres", prefix, w, sqlExec(db), postgresOrders, postgresFill, func() { db.Close() })
	if err != nil {
		return nil, err
	}
	t.db = db
	postgresAdmin(ctx, t, sqlExec(db), func(ctx context.Context, s string, args ...any) pgx.Row { return db.QueryRowContext(ctx, s, args...) })
	insert := sqlInsert(t.orders, "$1, $2")
	// database/sql sends each statement alone, idem's included (the lazy
	// connector holds BEGIN back for idem's driver only): the floor and
	// the seed go as the bare write does.
	yardsticks[*sql.Tx]{plain: sqlBegin(db), idem: sqlBegin(db), write: insert, sql: newSeedSQL("postgres", t.keys)}.add(t)
	var drv dialect.Driver[*sql.Tx]
	if lazy {
		drv, err = newLazyDriver(db)
	} else {
		drv, err = postgres.NewSQL(ctx, db, postgres.Options{})
	}
	if err == nil {
		err = storeOps(t, drv, insert)
	}
	if err != nil {
		t.close()
		return nil, err
	}
	return t, nil
}
