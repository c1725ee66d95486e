package main

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"time"

	sqlitedriver "modernc.org/sqlite"

	"github.com/idemkit/idem/sqlite"
)

const sqliteOrders = `CREATE TABLE %s (id INTEGER PRIMARY KEY, customer INTEGER NOT NULL, item_id INTEGER NOT NULL,
	created_at INTEGER NOT NULL DEFAULT (unixepoch()))`

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
	if err := db.QueryRowContext(ctx, `SELECT sqlite_version(), (SELECT journal_mode FROM pragma_journal_mode), (SELECT synchronous FROM pragma_synchronous)`).
		Scan(&version, &journal, &synchronous); err != nil {
		db.Close()
		return nil, err
	}
	t, err := newTarget("sqlite", "sqlite", "bench_sqlite", w, sqlExec(db), sqliteOrders, sqliteFill, func() { db.Close(); _ = os.RemoveAll(dir) })
	if err != nil {
		return nil, err
	}
	t.db, t.ping = db, nil
	t.server = fmt.Sprintf("SQLite %s (modernc.org/sqlite), journal_mode=%s, synchronous=%d, %d connection(s), file in %s", version, journal, synchronous, conns, dir)
	insert := sqlInsert(t.orders, "?, ?")
	drv, err := sqlite.New(ctx, db, sqlite.Options{})
	if err == nil {
		// idem's driver keeps the floor's and the seed's statements
		// prepared, as it keeps its own.
		yardsticks[*sql.Tx]{plain: sqlBegin(db), idem: driverBegin(drv), write: insert, sql: newSeedSQL("sqlite", t.keys)}.add(t)
		err = storeOps(t, drv, insert)
	}
	if err != nil {
		t.close()
		return nil, err
	}
	t.sizes = sqlSizes(db, "", `SELECT
		COALESCE((SELECT SUM(pgsize) FROM dbstat WHERE name = ?1), 0),
		COALESCE((SELECT SUM(pgsize) FROM dbstat WHERE name IN (SELECT name FROM sqlite_schema WHERE type = 'index' AND tbl_name = ?1)), 0)`)
	t.settle = func(ctx context.Context, _ string) error {
		_, err := db.ExecContext(ctx, `PRAGMA wal_checkpoint(TRUNCATE)`)
		return err
	}
	t.bulkLoad = func(ctx context.Context, table string, n int64, progress func(int64)) error {
		return sqlBulkLoad(ctx, db, table, n, 500, 200_000, "(?, ?, ?, ?, ?, ?, ?, ?)",
			func(dst []any, r *scaleRow) []any {
				return append(dst, r.scope, r.key, r.fingerprint[:], r.status, r.header, r.body, r.created.UnixMicro(), r.expires.UnixMicro())
			}, progress)
	}
	return t, nil
}
