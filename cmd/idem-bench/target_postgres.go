package main

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/idemkit/idem/postgres"
)

// postgresOrders is the user's table.
const postgresOrders = `CREATE TABLE %s (id bigserial PRIMARY KEY, customer bigint NOT NULL, item_id bigint NOT NULL,
	created_at timestamptz NOT NULL DEFAULT now())`

// postgresFill is target.fill's statement: numbers $1 to $2, and the
// verbs fill formats.
const postgresFill = `INSERT INTO %[1]s (scope, idem_key, fingerprint, status, header, body, created_at, expires_at)
SELECT '%[2]s', lpad(to_hex(g * %[3]d), 12, '0') || '-' || lpad(to_hex(g), 23, '0'), sha256(g::text::bytea), 201,
	'\x%[5]x'::bytea, convert_to('{"order":' || g || '%[6]s', 'UTF8'),
	now() + interval '%[4]d seconds' - interval '1 day', now() + interval '%[4]d seconds'
FROM generate_series($1::bigint, $2::bigint) g`

// postgresAdmin sets what every PostgreSQL target reads and does outside
// its requests: the server's settings, the sizes and the settling after a
// bulk load (a vacuum and a checkpoint).
func postgresAdmin(ctx context.Context, t *target, exec execFunc, row func(ctx context.Context, s string, args ...any) pgx.Row) {
	var version, fsync, syncCommit, fpw, buffers string
	t.server = "unknown"
	if err := row(ctx, `SELECT current_setting('server_version'), current_setting('fsync'), current_setting('synchronous_commit'),
		current_setting('full_page_writes'), current_setting('shared_buffers')`).Scan(&version, &fsync, &syncCommit, &fpw, &buffers); err == nil {
		t.server = fmt.Sprintf("PostgreSQL %s, fsync=%s, synchronous_commit=%s, full_page_writes=%s, shared_buffers=%s", version, fsync, syncCommit, fpw, buffers)
	}
	t.size = func(ctx context.Context, table string) (r relSize, err error) {
		err = row(ctx, `SELECT pg_table_size($1::regclass), pg_indexes_size($1::regclass), (SELECT count(*) FROM `+table+`)`, table).
			Scan(&r.tableBytes, &r.indexBytes, &r.rows)
		return r, err
	}
	t.writes = func(ctx context.Context, tables ...string) (c writeCounts, err error) {
		err = row(ctx, `SELECT (pg_current_wal_lsn() - '0/0')::bigint, (SELECT wal_fpi FROM pg_stat_wal),
			coalesce(sum(n_tup_ins), 0), coalesce(sum(n_tup_upd) FILTER (WHERE relname = $2), 0),
			coalesce(sum(n_tup_hot_upd) FILTER (WHERE relname = $2), 0)
			FROM pg_stat_user_tables WHERE relname = ANY($1)`, tables, tables[0]).Scan(&c.logBytes, &c.pages, &c.inserts, &c.updates, &c.hot)
		return c, err
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
	t, err := newTarget("postgres/pgx", prefix, w, exec, postgresOrders, postgresFill, pool.Close)
	if err != nil {
		return nil, err
	}
	postgresAdmin(ctx, t, exec, pool.QueryRow)
	insertSQL := `INSERT INTO ` + t.orders + ` (customer, item_id) VALUES ($1, $2)`
	insert := func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, insertSQL, customer, itemID)
		return err
	}
	insertMany := func(ctx context.Context, tx pgx.Tx, rows int) error {
		_, err := tx.Exec(ctx, ordersInsertSQL(t.orders, rows, true), ordersArgs(rows)...)
		return err
	}
	drv, err := postgres.New(ctx, pool, postgres.Options{})
	if err == nil {
		// An application's pgx transaction sends BEGIN, each statement and
		// COMMIT alone, as a transaction of idem's driver does for the
		// user's write: one begin serves the bare write too.
		yardsticks[pgx.Tx]{plain: driverBegin(drv), idem: driverBegin(drv), write: insert, sql: newSeedSQL("postgres", t.keys)}.add(t)
		err = storeOps(t, drv, insert, insertMany)
	}
	if err != nil {
		t.close()
		return nil, err
	}
	return t, nil
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
		name, db = "postgres/sql-lazy", sql.OpenDB(postgres.HoldBegin(stdlib.GetConnector(*cc)))
	}
	db.SetMaxOpenConns(conns)
	db.SetMaxIdleConns(conns)
	t, err := newTarget(name, prefix, w, sqlExec(db), postgresOrders, postgresFill, func() { db.Close() })
	if err != nil {
		return nil, err
	}
	t.db = db
	postgresAdmin(ctx, t, sqlExec(db), func(ctx context.Context, s string, args ...any) pgx.Row { return db.QueryRowContext(ctx, s, args...) })
	insert := sqlInsert(t.orders, "$1, $2")
	// database/sql sends each statement alone, idem's included (a held
	// BEGIN saves round trips in idem's transactions only): the floor and
	// the seed go as the bare write does.
	yardsticks[*sql.Tx]{plain: sqlBegin(db), idem: sqlBegin(db), write: insert, sql: newSeedSQL("postgres", t.keys)}.add(t)
	drv, err := postgres.NewSQL(ctx, db, postgres.Options{})
	if err == nil {
		err = storeOps(t, drv, insert, sqlInsertMany(t.orders, true))
	}
	if err != nil {
		t.close()
		return nil, err
	}
	return t, nil
}
