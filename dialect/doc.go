// Package dialect is the contract an idem backend implements, the meanings
// its errors are mapped to, and what a backend needs to build on it: the
// database/sql parts, the statement catalogs and cache, the migration loader
// and the optional abilities with their fallbacks. A backend imports this package
// only, never the core (github.com/idemkit/idem), the way a database/sql
// driver imports only database/sql/driver.
//
// # Writing a dialect
//
// A backend is three values:
//
//   - a Dialect holds the SQL rules of one database family and no
//     connection: the versioned schema, the claim, complete, lookup and
//     purge statements, and Classify, which maps the driver's typed errors
//     to the meanings in this package;
//   - a Driver binds a Dialect to one connection pool and one native
//     transaction type (TTx: *sql.Tx, pgx.Tx): it begins transactions the
//     way the database needs (BEGIN IMMEDIATE, an isolation level), adapts
//     a caller's transaction with Wrap, and runs lookups on its Pool;
//   - the Tx its Begin returns, which alone knows whether a failed COMMIT
//     was sent, and so reports ErrCommitUnknown.
//
// The core begins and ends every transaction; the Dialect only runs
// statements on the Queryer it is given. Users pass the Driver to idem.New;
// nothing is registered globally, and library code never blank-imports a
// database driver. Give the constructor the shape every backend has:
// New(ctx, handle, Options) (*Driver, error), where ctx bounds the checks
// of the server it makes (version, settings), and a bad handle or option is
// an error wrapping ErrInvalidConfig.
//
// # A backend on database/sql
//
// CheckSQLDB and CheckIsolation make the constructor's checks (the handle's
// driver, the levels the database has); NewSQLQueryer adapts a *sql.DB (the
// pool) or *sql.Tx (Wrap); BeginSQL begins the Tx Begin returns, on a
// connection of its own when the backend needs one (SQLBegin.OwnConn, with
// a Setup for a session setting the transaction changes). Its Commit
// already tells a COMMIT that was never sent (the transaction's context had
// ended: database/sql rolls back) from one that was; give it a CommitError
// that wraps ErrCommitUnknown when a sent COMMIT failed without the
// server's answer. Every backend's Driver offers the same accessors: DB (the
// handle New got), Dialect, Pool, Wrap and Begin.
//
//	type Driver struct {
//		db      *sql.DB
//		level   sql.IsolationLevel
//		pool    dialect.Queryer
//		dialect *Dialect
//	}
//
//	var levels = []sql.IsolationLevel{sql.LevelReadCommitted, sql.LevelSerializable}
//
//	func New(ctx context.Context, db *sql.DB, opts Options) (*Driver, error) {
//		if err := dialect.CheckSQLDB[*mydriver.Driver]("mydb", db, "example.com/mydriver"); err != nil {
//			return nil, err
//		}
//		if err := dialect.CheckIsolation("mydb", opts.Isolation, levels...); err != nil {
//			return nil, err
//		}
//		pool, err := dialect.NewSQLQueryer(db)
//		if err != nil {
//			return nil, err
//		}
//		return &Driver{db: db, level: opts.Isolation, pool: pool, dialect: NewDialect()}, nil
//	}
//
//	func (d *Driver) DB() *sql.DB              { return d.db }
//	func (d *Driver) Dialect() dialect.Dialect { return d.dialect }
//	func (d *Driver) Pool() dialect.Queryer    { return d.pool }
//
//	func (d *Driver) Wrap(tx *sql.Tx) (dialect.Queryer, error) { return dialect.NewSQLQueryer(tx) }
//
//	func (d *Driver) Begin(ctx context.Context, o dialect.BeginOptions) (dialect.Tx[*sql.Tx], error) {
//		level := o.IsolationOr(d.level)
//		if err := dialect.CheckIsolation("mydb", level, levels...); err != nil {
//			return nil, err
//		}
//		tx, err := dialect.BeginSQL(ctx, d.db, dialect.SQLBegin{Options: &sql.TxOptions{Isolation: level}, CommitError: commitError})
//		if err != nil {
//			return nil, err
//		}
//		return tx, nil
//	}
//
//	// commitError: a server's error is a known failure; a lost connection
//	// after COMMIT left is not.
//	func commitError(err error) error {
//		var se *mydriver.ServerError
//		if errors.As(err, &se) {
//			return err
//		}
//		return dialect.Classified(dialect.ErrCommitUnknown, err)
//	}
//
// The file guide_test.go of this package holds that skeleton, with a whole
// Dialect, and compiles it.
//
// # The rules of the statements
//
// Think about these rules of your database before writing SQL:
//
//   - The claim is ONE statement that tells the winner from the loser: an
//     INSERT ... ON CONFLICT DO NOTHING ... RETURNING where the database has
//     it, or an INSERT whose duplicate-key error rolls back only that
//     statement (InnoDB). Never read first and write second, and never rely
//     on a statement error that aborts the caller's whole transaction
//     (PostgreSQL's 23505 does).
//   - Complete is a separate statement. Folded into the claim (a
//     data-modifying CTE) it could not see the claimed row. It also moves
//     the expiry, but only forward: expires_at = GREATEST(expires_at, now +
//     CompleteArgs.Retention). The claim's expiry (ClaimArgs.Retention)
//     already includes idem.ExpiryGrace, so a completion within the grace
//     leaves it, and writes no indexed column; on a database that rewrites
//     an index whenever its column is named in SET, even to the same value
//     (SQLite), leave expires_at out of the fast statement (see the sqlite
//     package's complete and complete_late).
//   - Visibility: a loser must read the latest committed record, whatever
//     snapshot the caller's transaction took before the claim (a locking
//     read on InnoDB), or fail with an error Classify maps to
//     ErrSerialization, which the core retries.
//   - Waits: a loser waits for the winner's transaction at most
//     ClaimArgs.WaitBound (lock_timeout, innodb_lock_wait_timeout,
//     busy_timeout), then fails with an error Classify maps to
//     ErrLockTimeout. The bound is the claim's only: restore the session
//     setting you changed before the claim returns, on every path, so the
//     caller's statements in the same transaction wait as they would without
//     idem (the suite's WaitBoundOnlyForClaim checks it).
//     BeginOptions.WaitBound bounds BEGIN itself, for a database whose
//     writers wait there (SQLite's BEGIN IMMEDIATE); it does not bound the
//     transaction's statements.
//   - Expiry: compare expires_at with ClaimArgs.Now, or with the database's
//     clock when it is zero; expired is expires_at <= now, live is
//     expires_at > now. An expired record is taken over in the claim: by an
//     upsert whose update is guarded by the expiry (ON CONFLICT DO UPDATE
//     ... WHERE expires_at <= now), or, when the insert lost, by an UPDATE
//     guarded the same way; of two takeovers one wins and the other waits for
//     its row lock, then finds the record live and loses. Report a row that
//     vanished between two statements as ErrSerialization.
//   - Purge deletes at most PurgeArgs.Limit expired rows, skipping rows
//     other transactions hold (FOR UPDATE SKIP LOCKED), and never a row a
//     claim has just taken over.
//   - Keys and scopes compare byte for byte (a binary or "C" collation,
//     VARBINARY); times keep microseconds and compare exactly.
//   - Classify by typed codes (SQLSTATE, error numbers, extended result
//     codes) and error types, never by message text. Classify cannot tell
//     a COMMIT's error from another statement's: ErrCommitUnknown is the
//     Tx's to report (see Tx.Commit), and a lost connection on any other
//     statement is ErrUnavailable (ConnectionLost helps), because that
//     transaction is gone and nothing was committed.
//
// Statement text is built once per table (Statements caches it); a
// validated Table needs no escaping beyond your database's identifier
// quotes. Keep the SQL in one place per backend, readable as SQL: a catalog
// of queries/*.sql files with named parameters (@scope, @now), loaded with
// LoadQueries, and the DDL in migrations/*.sql.
//
// # The versioned schema
//
// Schema returns the table's migrations and the statements that keep its
// version; Store.Migrate runs them in one transaction the core begins (see
// Schema for the order). Keep each migration in an embedded file,
// migrations/NNNN_name.sql, a text/template over the Table ({{.Name}},
// {{.Index "expires"}}), and load them with LoadMigrations. The first
// migration creates the table IF NOT EXISTS, so a table made before
// versions were recorded becomes version 1. Never change a released
// migration: add the next one. Give Schema.Lock a lock that makes
// concurrent migrations of one table take turns (a transaction-scoped
// advisory lock; a session lock with Schema.Unlock where DDL commits on its
// own). On a database whose DDL commits on its own, give each migration one
// atomic statement, and make it safe to run again: IF NOT EXISTS where the
// database has it, else a migrations/NNNN_name.applied.sql query that finds
// the step in place (Migration.Applied), since a crash between its DDL and
// its version's record leaves the DDL there. The suite's
// MigrateAfterCrashBeforeVersion case checks it.
//
// # Lease mode
//
// A Dialect that also implements Leaser runs idem's lease mode (see its
// documentation for the invariants: expires_at never before lease_until,
// a key's tokens only grow across all its lifetimes, a lost claim writes
// nothing after its insert, fenced writes name the token and the
// fingerprint and report ErrLeaseLost). Its schema keeps the table's token
// floor (<name>_fence), which its Purge and Admin.Delete raise. The suite's
// Lease* cases check it; LeaseFencingAcrossLifetimes and
// LeaseClaimsOnLiveLease are the ones a first attempt usually fails.
// Without Leaser, Store.Lease fails with an error wrapping
// errors.ErrUnsupported.
//
// # Optional abilities
//
// A Queryer or Tx may implement Pipeliner (several statements in one round
// trip), Preparer (statements kept prepared) and CommitDeferrer (a
// statement sent with COMMIT). The Dialect reaches them only through
// Pipeline, ExecPrepared, QueryPrepared and DeferToCommit, which fall back
// to one plain statement at a time, with the same result. Never type-assert
// your own driver's private types in the Dialect: a wrapper around the
// transaction (a tracer, the suite's fault injector) would silently lose the
// ability. A wrapper keeps one by implementing its interface with those
// functions (see conformance.WrappedTx).
//
// A Dialect's own abilities beyond the lifecycle are optional too: Admin
// (the operator's view: Inspect, List, Delete, Counts), Leaser (lease mode)
// and Scripter (migration files for other tools). What needs one the
// Dialect lacks fails with an error wrapping errors.ErrUnsupported, the one
// signal for a missing ability; the rest of the store works.
//
// # Pitfalls seen in real backends
//
//   - PostgreSQL: lock_timeout = 0 means wait forever, so a sub-millisecond
//     bound must become 1ms; timestamptz + interval with a days part depends
//     on the session's time zone (across a DST change a day is 23 or 25
//     hours), so add the retention as microseconds; a failed statement
//     aborts the whole transaction (25P02 afterwards), so a claim must not
//     rely on catching 23505; set_config(..., true) is transaction-local,
//     which is what a wait bound wants.
//   - MySQL and MariaDB: innodb_lock_wait_timeout counts whole seconds and
//     MySQL has no per-statement form (MariaDB has SET STATEMENT ... FOR);
//     a REPEATABLE READ snapshot is taken at the first read, so a loser
//     needs a locking read (LOCK IN SHARE MODE) to see the winner; deadlocks
//     (1213) are normal on contended duplicate keys; DDL commits on its own.
//   - SQLite: a deferred transaction that read before writing fails with
//     SQLITE_BUSY_SNAPSHOT, which busy_timeout cannot help, so begin
//     IMMEDIATE; busy_timeout is per connection; ":memory:" is one database
//     per connection unless shared.
//
// Error codes worth mapping:
//
//	meaning             PostgreSQL (SQLSTATE)          MySQL/MariaDB            SQLite
//	ErrUniqueViolation  23505                          1062                     SQLITE_CONSTRAINT_PRIMARYKEY, _UNIQUE
//	ErrSerialization    40001                          1020 (MariaDB)           SQLITE_BUSY_SNAPSHOT
//	ErrDeadlock         40P01                          1213                     -
//	ErrLockTimeout      55P03, 57014                   1205, 3572               SQLITE_BUSY, SQLITE_LOCKED
//	ErrReadOnly         25006                          1792, 1290               SQLITE_READONLY
//	ErrTooLarge         54000                          1153, 1406, 1118, 1301   SQLITE_TOOBIG
//	ErrTxAborted        25P02; COMMIT answered ROLLBACK -                       -
//	ErrInvalidValue     22021, 22P05                   1366                     -
//	ErrUnavailable      08xxx, 57P01-57P03, lost conn  1040, 1047, 1053, 1927   -
//	                    25006 on a hot standby         1290 on a group member
//	ErrCommitUnknown    40003 (CockroachDB); lost conn lost connection at COMMIT -
//
// # Proving it
//
// Run the shared suite from your package's tests; it creates its own tables
// and runs every case in parallel, reading Capabilities for the differences
// it may expect (never which backend runs):
//
//	func TestConformance(t *testing.T) {
//		conformance.Run(t, conformance.Backend[*sql.Tx]{
//			Name: "mydb",
//			Open: func(t *testing.T) dialect.Driver[*sql.Tx] {
//				d, err := mydb.New(t.Context(), sharedDB(t), mydb.Options{})
//				if err != nil {
//					t.Fatal(err)
//				}
//				return d
//			},
//			// A read-only transaction, to check a claim there fails
//			// with ErrBadTx and ErrReadOnly (required).
//			BeginReadOnly: func(t *testing.T, d dialect.Driver[*sql.Tx]) *sql.Tx { ... },
//			// A driver whose connection breaks right after COMMIT
//			// left, to check ErrCommitUnknown (optional: nil skips
//			// that case, as for a database in the process).
//			BreakCommit: func(t *testing.T) conformance.CommitBreaker[*sql.Tx] { ... },
//		})
//	}
//
// Some cases provoke real errors through your backend, so that Classify
// meets the driver's own: a unique violation and a deadlock in the caller's
// function, a read-only transaction, a COMMIT whose connection breaks.
// Races are proven, not hoped for: the winner holds the key until its
// losers are seen waiting inside their claims (conformance.Observer).
//
// # The model
//
// Run also runs the case Model: pgregory.net/rapid draws sequences of
// operations over a few keys, scopes and bodies (Do with a function that
// answers, fails or fails retryably; Claim and Complete in the caller's
// transaction; Lease, Extend, RecordStep, lease Complete, Release, Resume,
// and holders that keep calling after they lost; Delete, ForceDelete,
// Purge; the store's clock moving past leases and retention), runs them on
// your backend and checks every answer, every record and every effect row
// against a reference written in plain Go maps. It stops starting new
// sequences after 20 s or 3,000 steps; IDEM_MODEL_TIME and
// IDEM_MODEL_STEPS raise both for a soak:
//
//	IDEM_MODEL_TIME=30m IDEM_MODEL_STEPS=1000000 go test -run 'TestConformance/Model$' ./mydb/
//
// A failure names the step, what your store answered and what the model
// says, the seed that replays it, and the sequence rapid shrank it to, a
// line per step. Reverting the token floor of SQLite's lease claims (so a
// key claimed afresh after a delete gets token 1 again) reads:
//
//	[rapid] failed after 0 tests: [mydb] step 3: lease on model-a/k2: token 1 is
//	    not above 1, the key's largest token so far (the token floor is 1)
//	To reproduce, specify -run="TestConformance/Model" -rapid.failfile="testdata/rapid/..." (or -rapid.seed=16148635764638582000)
//	Failed test output:
//	step 1: Lease model-a/k2 body "x" on the store: won token 1 resumed=false
//	step 2: ForceDelete model-a/k2: err <nil>
//	step 3: Lease model-a/k2 body "x" on the store: won token 1 resumed=false
//
// Read it bottom up: the last step is the one that broke a promise, the
// ones before it are the least rapid needed to get there (the "[rapid]
// draw" lines between them are the choices it made). Replay it with the
// printed flags, add t.Logf calls to your dialect and run again: the same
// sequence runs. The model runs with Config.Clock set and ReadFirstNever
// and ReadFirstAlways, so your dialect's SQL must take the store's clock
// from the arguments (the Now fields), never only from the database.
//
// Run also runs History: four workers run Do and lease work on a few keys
// while COMMITs are cut before they leave, broken after they left (set
// Backend.BreakCommit) or reported with an unknown outcome, and the
// history of calls and returns must be linearizable against an idempotent
// register per key (a failure names the seed, IDEM_HISTORY_SEED, and a
// file with porcupine's visualisation). Backend.Restart lets it restart
// your server too; give it on a server no other test uses, and run the
// case alone:
//
//	conformance.RunCases(t, b, []conformance.Case[*sql.Tx]{conformance.History[*sql.Tx]()})
//
// The HTTP suite (idemhttp/idemhttptest.Run) takes the same Backend. For a
// server in a container, see github.com/idemkit/idem/integration/containers.
package dialect
