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

// sqliteFill is target.fill's statement: numbers ?1 to ?2, and the verbs
// fill formats (%% is printf's own %).
const sqliteFill = `WITH RECURSIVE g(n) AS (SELECT ?1 UNION ALL SELECT n + 1 FROM g WHERE n < ?2)
INSERT INTO %[1]s (scope, idem_key, fingerprint, status, header, body, created_at, expires_at)
SELECT '%[2]s', printf('%%012x-%%023x', n * %[3]d, n), randomblob(32), 201, x'%[5]x', '{"order":' || n || '%[6]s',
	CAST((unixepoch('subsec') + %[4]d - 86400) * 1000000 AS INTEGER), CAST((unixepoch('subsec') + %[4]d) * 1000000 AS INTEGER)
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
	t, err := newTarget("sqlite", "bench_sqlite", w, sqlExec(db), sqliteOrders, sqliteFill, func() { db.Close(); _ = os.RemoveAll(dir) })
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
		err = storeOps(t, drv, insert, sqlInsertMany(t.orders, false))
	}
	if err != nil {
		t.close()
		return nil, err
	}
	t.size = func(ctx context.Context, table string) (relSize, error) {
		return sqlSize(ctx, db, table, `SELECT
			COALESCE((SELECT SUM(pgsize) FROM dbstat WHERE name = ?1), 0),
			COALESCE((SELECT SUM(pgsize) FROM dbstat WHERE name IN (SELECT name FROM sqlite_schema WHERE type = 'index' AND tbl_name = ?1)), 0)`)
	}
	// The WAL's frames since the probe emptied it, each a page and a
	// 24-byte header.
	t.writesReset = func(ctx context.Context) error {
		var busy, frames, done int64
		err := db.QueryRowContext(ctx, `PRAGMA wal_checkpoint(TRUNCATE)`).Scan(&busy, &frames, &done)
		if err == nil && (busy != 0 || frames != 0) {
			err = fmt.Errorf("the WAL could not be emptied (busy %d, %d frames)", busy, frames)
		}
		return err
	}
	t.writes = func(ctx context.Context, _ ...string) (writeCounts, error) {
		var busy, frames, done, pageSize int64
		if err := db.QueryRowContext(ctx, `PRAGMA wal_checkpoint(PASSIVE)`).Scan(&busy, &frames, &done); err != nil {
			return writeCounts{}, err
		}
		err := db.QueryRowContext(ctx, `PRAGMA page_size`).Scan(&pageSize)
		return writeCounts{logBytes: frames * (pageSize + 24), pages: frames, inserts: -1}, err
	}
	t.settle = func(ctx context.Context, _ string) error {
		_, err := db.ExecContext(ctx, `PRAGMA wal_checkpoint(TRUNCATE)`)
		return err
	}
	return t, nil
}
