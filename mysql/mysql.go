// Package mysql is idem's MySQL and MariaDB backend, on
// github.com/go-sql-driver/mysql through database/sql. It targets MySQL
// 8.0 and later and MariaDB 10.6 and later (tested: MySQL 9.7, MariaDB 10.11
// and 11.8, a MariaDB 11.8 Galera cluster) and uses only SQL both accept (no
// RETURNING; LOCK IN SHARE MODE rather than FOR SHARE).
//
// New(ctx, db, Options) on a *sql.DB opened with the "mysql" driver gives a
// Driver whose transactions are *sql.Tx; it is what idem.New takes:
//
//	db, err := sql.Open("mysql", "app@tcp(db:3306)/orders")
//	if err != nil { ... }
//	driver, err := mysql.New(ctx, db, mysql.Options{})
//	if err != nil { ... }
//	store, err := idem.New(driver, idem.Config{})
//
// Options.Isolation is the level transactions begin with (the server's,
// REPEATABLE READ unless configured, by default). New reads the server's
// version and settings, bounded by ctx, and refuses (with
// idem.ErrInvalidConfig) a nil *sql.DB or one of another driver, a level
// InnoDB lacks, a session whose sql_mode is not strict (STRICT_TRANS_TABLES
// or STRICT_ALL_TABLES), where MySQL would silently truncate values, and
// servers older than MySQL 8.0.1 or MariaDB 10.6 (no SKIP LOCKED for
// purge). None of the DSN settings clientFoundRows, parseTime, loc,
// interpolateParams or multiStatements changes idem's behaviour.
//
// What InnoDB needs, and this package does:
//
//   - The claim is a plain INSERT. It succeeds for the winner; a loser gets
//     error 1062, which in InnoDB rolls back only the statement, not the
//     transaction. The winner is told from the loser by that error, never by
//     INSERT IGNORE (which turns truncation and other errors into warnings)
//     and never by an affected-rows count (which clientFoundRows changes).
//
//   - A loser reads the record with LOCK IN SHARE MODE: a locking read sees
//     the latest committed row, where InnoDB's REPEATABLE READ snapshot,
//     taken at the transaction's first read, might not. The shared lock the
//     duplicate-key check already took keeps the row stable until the
//     transaction ends. An expired record is then taken over with an UPDATE
//     guarded by its expiry.
//
//   - Deadlocks (1213) are part of normal concurrency on duplicate keys (two
//     waiters on a rolled-back insert both hold shared locks and both want an
//     exclusive one): they are classified retryable and Do retries. A
//     deadlock rolls back the whole transaction, so the claim returns at once.
//
//   - The claim's waits are bounded by innodb_lock_wait_timeout. On MariaDB
//     (told apart by New from the server's version) each of the claim's
//     statements carries it: SET STATEMENT innodb_lock_wait_timeout=N FOR
//     .... MySQL has no SET STATEMENT, and its SET_VAR hint does not apply
//     to InnoDB's variables, so there the session's value is set for the
//     claim and restored afterwards (two more round trips). It counts whole
//     seconds, so the store's wait bound is rounded up to a second. A lock
//     wait timeout (1205) becomes InFlight; as InnoDB rolls back only the
//     statement, the caller must roll back (Do does). Behind vtgate the
//     statements carry vtgate's query timeout instead, whole seconds
//     written in milliseconds (vitess.go).
//
//   - Keys and scopes are VARBINARY(255): compared byte for byte, whatever
//     the connection's collation. Times are DATETIME(6) in UTC (microseconds,
//     no 2038 limit); they cross the wire as Unix microseconds, so the DSN's
//     parseTime and loc settings do not matter. The database's clock is
//     UTC_TIMESTAMP(6).
//
//   - The body is a LONGBLOB. A response larger than the server's
//     max_allowed_packet is refused with ErrTooLarge before it is sent,
//     instead of breaking the connection.
//
//   - MariaDB 11.6 and later run REPEATABLE READ with innodb_snapshot_isolation
//     on, under which the loser's locking read fails (1020) when the winner
//     committed after the transaction's snapshot. Where the server has the
//     variable, the claim's statements turn it off for themselves, so the
//     loser reads the latest record as above.
//
//   - On a MariaDB Galera node, lookups are causal reads; the
//     claim relies on certification: a claim that raced another node's, or
//     ran before its node applied another node's committed record, may win
//     locally, and then fails with 1213 at a later statement or at COMMIT,
//     which Do retries and replays. A won claim is final only once COMMIT
//     succeeds. Now and then the server reports that abort to no
//     statement; only a lease claim checks for it.
//
//   - Errors are classified by *mysql.MySQLError numbers, never by text,
//     but for vtgate's, which share 1317 and 1105 among causes (vitess.go).
//
//   - The dialect's statements are sent as text with their values written in
//     as hexadecimal, integer or NULL literals, so each is one round trip
//     whatever the DSN says (with interpolateParams=false, go-sql-driver
//     makes a statement with arguments a server-side prepare, an execute and
//     a close). No value can change a statement that way. A statement with
//     a large value (a response body over a few dozen kilobytes) keeps its
//     placeholders, so max_allowed_packet stays the limit it was.
//
//   - Purge locks a batch of expired keys with SKIP LOCKED and deletes them
//     with a list of row constructors, (scope, idem_key) IN ((…), …), which
//     the range optimizer reads as one range per key.
//
//   - The schema is versioned (migrations/*.sql, one atomic statement each,
//     since DDL commits on its own here). Store.Migrate takes a named lock
//     of the session (GET_LOCK) so that several processes may migrate at
//     once.
//
//   - Behind Vitess's vtgate (@@version ends in "-Vitess"), New accepts only
//     transaction_mode SINGLE, under which a transaction that writes on a
//     second shard is refused (ErrCrossShard) and rolled back whole. On a
//     sharded keyspace Migrate routes idem's tables in the VSchema
//     (VitessOptions): keep each record on the shard of the effect it
//     protects by routing your tables by the same value. The function may
//     read and write only that shard; the claim's statements carry vtgate's
//     query timeout, the wait bound in whole seconds. vitess.go and
//     docs/clusters.md say the rest.
package mysql

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"
	"time"

	mysqldriver "github.com/go-sql-driver/mysql"

	"github.com/idemkit/idem/dialect"
)

// Options configure a MySQL driver.
type Options struct {
	// Isolation is the level transactions begin with when a call asks for
	// none: sql.LevelDefault (the server's, REPEATABLE READ unless
	// configured), sql.LevelReadCommitted, sql.LevelRepeatableRead or
	// sql.LevelSerializable.
	Isolation sql.IsolationLevel
	// Vitess says how idem's tables are routed on a sharded keyspace
	// behind Vitess's vtgate (vitess.go). New checks it everywhere; only
	// vtgate uses it.
	Vitess VitessOptions
}

// Driver runs idem on a *sql.DB opened with github.com/go-sql-driver/mysql.
// Its transactions are *sql.Tx.
type Driver struct {
	db      *sql.DB
	level   sql.IsolationLevel
	pool    *poolQueryer
	dialect *mysqlDialect
}

// checkIsolation refuses a level InnoDB does not have.
func checkIsolation(l sql.IsolationLevel) error {
	return dialect.CheckIsolation("mysql", l, sql.LevelReadCommitted, sql.LevelRepeatableRead, sql.LevelSerializable)
}

var _ dialect.Driver[*sql.Tx] = (*Driver)(nil)

// server describes what New read from the server.
type server struct {
	version          string
	mariaDB          bool
	maxAllowedPacket int64
	sqlMode          string
	galera           bool // a Galera cluster node (galera.go)
	// snapshotIsolation: the server has innodb_snapshot_isolation (MariaDB
	// 10.6.18+, 10.11.8+, 11.x; ON by default from 11.6), under which a
	// locking read of a row changed after the transaction's snapshot fails
	// with 1020 instead of reading the latest version.
	snapshotIsolation bool
	// groupMember: a MySQL Group Replication member (grouprepl.go).
	groupMember bool
	// vitess: Vitess's vtgate (vitess.go).
	vitess bool
}

// New returns a Driver on db, after checking the server (ctx bounds that):
// its version, its max_allowed_packet (bodies that cannot fit are refused)
// and a strict sql_mode.
func New(ctx context.Context, db *sql.DB, opts Options) (*Driver, error) {
	if err := dialect.CheckSQLDB[*mysqldriver.MySQLDriver]("mysql", db, "github.com/go-sql-driver/mysql"); err != nil {
		return nil, err
	}
	if err := checkIsolation(opts.Isolation); err != nil {
		return nil, err
	}
	vopts, err := opts.Vitess.withDefaults()
	if err != nil {
		return nil, err
	}
	srv, err := inspect(ctx, db)
	if err != nil {
		return nil, err
	}
	pool, err := newPoolQueryer(db)
	if err != nil {
		return nil, err
	}
	d := newDialect(srv.maxAllowedPacket)
	d.perStatementWait = srv.mariaDB || srv.vitess
	d.causalLookups = srv.mariaDB && srv.galera
	d.certified = srv.galera
	d.guarded = srv.galera || srv.vitess
	d.groupMember = srv.groupMember
	d.latestLockedReads = srv.mariaDB && srv.snapshotIsolation
	if srv.vitess {
		vs, err := inspectVitess(ctx, pool)
		if err != nil {
			return nil, err
		}
		d.vitess = true
		if vs.sharded {
			fence, err := newFenceSession(ctx, db)
			if err != nil {
				return nil, err
			}
			d.vschema, d.fence = &vopts, fence
		}
	}
	return &Driver{db: db, level: opts.Isolation, pool: pool, dialect: d}, nil
}

// inspect reads and checks the server's version and settings.
func inspect(ctx context.Context, db *sql.DB) (server, error) {
	var s server
	// @@version, not VERSION(): vtgate answers the first itself and sends
	// the second to a shard's MySQL.
	err := db.QueryRowContext(ctx, "SELECT @@version, @@max_allowed_packet, @@SESSION.sql_mode").Scan(&s.version, &s.maxAllowedPacket, &s.sqlMode)
	if err != nil {
		return s, fmt.Errorf("mysql: inspect server: %w", err)
	}
	s.mariaDB = strings.Contains(strings.ToLower(s.version), "mariadb")
	s.vitess = isVitess(s.version)
	major, minor, patch := parseVersion(s.version)
	oldest := [3]int{8, 0, 1}
	if s.mariaDB {
		oldest = [3]int{10, 6, 0}
	}
	if !versionAtLeast([3]int{major, minor, patch}, oldest) {
		return s, fmt.Errorf("mysql: %w: server %s is older than %d.%d.%d", dialect.ErrInvalidConfig, s.version, oldest[0], oldest[1], oldest[2])
	}
	if !strings.Contains(s.sqlMode, "STRICT_TRANS_TABLES") && !strings.Contains(s.sqlMode, "STRICT_ALL_TABLES") {
		return s, fmt.Errorf("mysql: %w: sql_mode %q is not strict; idem needs STRICT_TRANS_TABLES or STRICT_ALL_TABLES so no value is silently truncated", dialect.ErrInvalidConfig, s.sqlMode)
	}
	vars, err := serverVariables(ctx, db, "wsrep_on", "wsrep_provider", "innodb_snapshot_isolation", "group_replication_group_name")
	if err != nil {
		return s, err
	}
	s.galera = galeraNode(vars)
	s.groupMember = vars["group_replication_group_name"] != ""
	_, s.snapshotIsolation = vars["innodb_snapshot_isolation"]
	return s, nil
}

func parseVersion(v string) (major, minor, patch int) {
	v, _, _ = strings.Cut(v, "-")
	parts := strings.SplitN(v, ".", 3)
	nums := make([]int, 3)
	for i := 0; i < len(parts) && i < 3; i++ {
		nums[i], _ = strconv.Atoi(parts[i])
	}
	return nums[0], nums[1], nums[2]
}

func versionAtLeast(v, oldest [3]int) bool {
	for i := range v {
		if v[i] != oldest[i] {
			return v[i] > oldest[i]
		}
	}
	return true
}

// Close gives back the connection New reserved behind vtgate on a sharded
// keyspace (for the lease token floor); elsewhere it does nothing. The
// *sql.DB stays open, and the driver must not be used afterwards. Make one
// Driver per database and process, as a *sql.DB, and Close it when done.
func (d *Driver) Close() error {
	if d.dialect.fence == nil {
		return nil
	}
	return d.dialect.fence.close()
}

// DB returns the *sql.DB the driver runs on, as New was given it.
func (d *Driver) DB() *sql.DB { return d.db }

// Dialect returns the MySQL dialect: the statements idem runs.
func (d *Driver) Dialect() dialect.Dialect { return d.dialect }

// Pool runs idem's statements outside any caller's transaction, on the
// *sql.DB; its lookups run prepared.
func (d *Driver) Pool() dialect.Queryer { return d.pool }

// Wrap adapts a *sql.Tx the caller began on this database, for
// Store.Claim. It returns an error wrapping ErrBadTx for a nil transaction;
// statements on a finished one fail with ErrTxDone. On a Galera node and
// behind vtgate a claim needs a transaction Begin started (guard.go); in
// any other it is refused with ErrInvalidConfig.
func (d *Driver) Wrap(tx *sql.Tx) (dialect.Queryer, error) { return dialect.NewSQLQueryer(tx) }

// Begin starts a transaction at the asked isolation level (the configured
// one by default), on any connection of the pool. A COMMIT lost with its
// connection is reported as ErrCommitUnknown (behind vtgate, any server
// error from COMMIT too). On a Galera node and behind vtgate the
// transaction is guarded against a rollback no statement reported
// (guard.go): its session runs with autocommit off, and COMMIT is sent only
// once the transaction is known to be the one BEGIN started. Begin it so for
// Store.Claim too: Native gives the *sql.Tx for your statements, but end the
// transaction with this Tx's Commit or Rollback, which check and give the
// connection back.
func (d *Driver) Begin(ctx context.Context, opts dialect.BeginOptions) (dialect.Tx[*sql.Tx], error) {
	level := opts.IsolationOr(d.level)
	if err := checkIsolation(level); err != nil {
		return nil, err
	}
	b := dialect.SQLBegin{Options: &sql.TxOptions{Isolation: level}, CommitError: commitError}
	if d.dialect.vitess {
		b.CommitError = vitessCommitError
	}
	if opts.Schema && d.dialect.vitess {
		// Not guarded, as below; tried again while vtgate's VSchema lags
		// (vschemalag.go).
		tx, err := dialect.BeginSQL(ctx, d.db, b)
		if err != nil {
			return nil, err
		}
		return vschemaLagTx{tx, vschemaLagBound}, nil
	}
	if !d.dialect.guarded || opts.Schema {
		// Schema changes commit on their own: not guarded.
		return dialect.BeginSQL(ctx, d.db, b)
	}
	// A Galera node or vtgate: a guarded transaction (guard.go).
	b.OwnConn, b.Setup = true, guardSetup
	tx, err := dialect.BeginSQL(ctx, d.db, b)
	if err != nil {
		return nil, err
	}
	if err := setSavepoint(ctx, tx, txSavepoint); err != nil {
		_ = tx.Rollback(ctx)
		return nil, err
	}
	return guardedTx{tx, d.dialect.vitess}, nil
}

// lockWaitSeconds renders the wait bound for innodb_lock_wait_timeout,
// which counts whole seconds: rounded up, at least one.
func lockWaitSeconds(d time.Duration) int64 {
	return max(int64((d+time.Second-1)/time.Second), 1)
}
