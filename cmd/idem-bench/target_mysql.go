package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	mysqldriver "github.com/go-sql-driver/mysql"

	"github.com/idemkit/idem/mysql"
)

const mysqlOrders = `CREATE TABLE %s (id BIGINT AUTO_INCREMENT PRIMARY KEY, customer BIGINT NOT NULL, item_id BIGINT NOT NULL,
	created_at DATETIME(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)) ENGINE=InnoDB`

// mysqlDigits is 0..9 as a derived table, crossed five times for 100,000
// rows per chunk.
const mysqlDigits = `(SELECT 0 d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4
	UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9)`

// mysqlFill is target.fill's statement: numbers ? to ?, and the verbs
// fill formats.
const mysqlFill = `INSERT INTO %[1]s (scope, idem_key, fingerprint, status, header, body, created_at, expires_at)
SELECT '%[2]s', CONCAT(LPAD(LOWER(HEX(n * %[3]d)), 12, '0'), '-', LPAD(LOWER(HEX(n)), 23, '0')), UNHEX(SHA2(n, 256)), 201,
	X'%[5]x', CONCAT('{"order":', n, '%[6]s'),
	UTC_TIMESTAMP(6) + INTERVAL %[4]d SECOND - INTERVAL 1 DAY, UTC_TIMESTAMP(6) + INTERVAL %[4]d SECOND
FROM (SELECT ? + a.d + 10*b.d + 100*c.d + 1000*e.d + 10000*f.d AS n
	FROM ` + mysqlDigits + ` a, ` + mysqlDigits + ` b, ` + mysqlDigits + ` c, ` + mysqlDigits + ` e, ` + mysqlDigits + ` f) s
WHERE n <= ?`

// newMySQLTarget connects to MySQL or MariaDB with the DSN and extra DSN
// parameters; prefix names its tables (targets on one server keep apart).
func newMySQLTarget(dsn, params, prefix string, conns int, via *delayProxy) (*target, error) {
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
	cfg.DialFunc = countingDialer(w, func() protocol { return &mysqlProtocol{} }, via)
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
	t, err := newTarget(name, prefix, w, sqlExec(db), mysqlOrders, mysqlFill, func() { db.Close() })
	if err != nil {
		return nil, err
	}
	t.db = db
	t.server = fmt.Sprintf("%s %s, innodb_flush_log_at_trx_commit=%s, log_bin=%s, innodb_buffer_pool_size=%dM", name, version, flush, logBin, bufferPool>>20)
	insert := sqlInsert(t.orders, "?, ?")
	duplicate := func(err error) bool {
		var me *mysqldriver.MySQLError
		return errors.As(err, &me) && me.Number == 1062
	}
	yardsticks[*sql.Tx]{plain: sqlBegin(db), idem: sqlBegin(db), write: insert, sql: newSeedSQL("mysql", t.keys),
		inline: true, duplicate: duplicate}.add(t)
	drv, err := mysql.New(ctx, db, mysql.Options{})
	if err == nil {
		err = storeOps(t, drv, insert, sqlInsertMany(t.orders, false))
	}
	if err != nil {
		t.close()
		return nil, err
	}
	t.size = func(ctx context.Context, table string) (r relSize, err error) {
		if _, err := db.ExecContext(ctx, `ANALYZE TABLE `+table); err != nil {
			return r, err
		}
		return sqlSize(ctx, db, table, `SELECT data_length, index_length FROM information_schema.tables
			WHERE table_schema = DATABASE() AND table_name = ?`)
	}
	t.writes = func(ctx context.Context, _ ...string) (writeCounts, error) { return innodbWrites(ctx, db) }
	t.settle = func(ctx context.Context, table string) error {
		if _, err := db.ExecContext(ctx, `ANALYZE TABLE `+table); err != nil {
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

// innodbWrites reads InnoDB's redo LSN (MariaDB's Innodb_lsn_current,
// MySQL's Innodb_redo_log_current_lsn) and its buffer-pool write requests
// (page changes in memory, not pages written to disk).
func innodbWrites(ctx context.Context, db *sql.DB) (writeCounts, error) {
	c := writeCounts{inserts: -1}
	rows, err := db.QueryContext(ctx, `SHOW GLOBAL STATUS WHERE Variable_name IN
		('Innodb_lsn_current', 'Innodb_redo_log_current_lsn', 'Innodb_buffer_pool_write_requests')`)
	if err != nil {
		return c, err
	}
	defer rows.Close()
	for rows.Next() {
		var name string
		var v int64
		if err := rows.Scan(&name, &v); err != nil {
			return c, err
		}
		if name == "Innodb_buffer_pool_write_requests" {
			c.pages = v
		} else {
			c.logBytes = v
		}
	}
	if err := rows.Err(); err != nil {
		return c, err
	}
	if c.logBytes == 0 {
		return c, errors.New("no redo LSN among the server's status variables")
	}
	return c, nil
}
