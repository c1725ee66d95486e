package postgres

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemkit/idem/dialect"
)

// Dialect is PostgreSQL's statements and SQLSTATE mapping, shared by both
// drivers. It caches the statement text per table.
type Dialect struct {
	stmts *dialect.Statements[statements]
}

var _ dialect.Dialect = (*Dialect)(nil)

// NewDialect returns the PostgreSQL dialect.
func NewDialect() *Dialect { return &Dialect{stmts: dialect.NewStatements(newStatements)} }

// Name returns "postgres".
func (*Dialect) Name() string { return "postgres" }

// Capabilities: row-level locks, so a loser waits on the key only.
func (*Dialect) Capabilities() dialect.Capabilities { return dialect.Capabilities{} }

// Schema returns the CREATE TABLE and CREATE INDEX statements.
func (d *Dialect) Schema(t dialect.Table) []string {
	s := d.stmts.For(t)
	return []string{s.createTable, s.createIndex}
}

// Claim inserts the record unless the key has one, with lock_timeout set to
// the wait bound for that statement only: the insert saves the caller's
// lock_timeout and sets the bound before it runs, and its RETURNING clause
// puts the caller's back once the row is in. A winner is done in that one
// statement (sent with BEGIN in one round trip when Driver.Begin made the
// transaction). A loser's claim returned no row, so the bound is still set:
// its next statement restores it and reads the record the claim lost to. A
// loser whose record expired takes it over with a guarded UPDATE.
//
// The insert is ON CONFLICT DO NOTHING: a replay locks nothing and writes
// nothing, so it needs no transaction id and no WAL. It still waits for a
// transaction that holds the key (up to lock_timeout), and at REPEATABLE
// READ or SERIALIZABLE a conflict with a row the snapshot cannot see still
// raises 40001.
func (d *Dialect) Claim(ctx context.Context, q dialect.Queryer, t dialect.Table, a dialect.ClaimArgs) (dialect.ClaimResult, error) {
	s := d.stmts.For(t)
	now := clock(a.Now)
	timeout := lockTimeout(a.WaitBound)
	var (
		won, found, expired bool
		rec                 dialect.Record
	)
	err := run(ctx, q, step{sql: s.claim, args: []any{a.Scope, a.Key, a.Fingerprint, now, a.Retention.Microseconds(), timeout},
		rows: func(r rowReader) error { won = r.Next(); return nil }})
	if err != nil {
		return dialect.ClaimResult{}, err
	}
	if won {
		return dialect.ClaimResult{Won: true}, nil
	}
	err = runOne(ctx, q, step{sql: s.peek, args: []any{a.Scope, a.Key, now},
		rows: func(r rowReader) (err error) { rec, expired, found, err = scanRecord(r); return err }})
	if err != nil {
		return dialect.ClaimResult{}, err
	}
	if found && expired {
		// Take the expired record over. Two claimers may try: the second
		// waits for the first's row lock (bounded like the claim), then
		// finds the record live and loses.
		err = run(ctx, q,
			step{sql: setLockTimeout, args: []any{timeout}},
			step{sql: s.takeover, args: []any{a.Scope, a.Key, a.Fingerprint, now, a.Retention.Microseconds()},
				rows: func(r rowReader) error { won = r.Next(); return nil }},
			step{sql: restoreLockTimeout})
		if err != nil {
			return dialect.ClaimResult{}, err
		}
		if won {
			return dialect.ClaimResult{Won: true}, nil
		}
		if rec, expired, found, err = d.read(ctx, q, s, a.Scope, a.Key, now); err != nil {
			return dialect.ClaimResult{}, err
		}
	}
	if !found || expired {
		// The conflicting row expired or was purged between the
		// statements: a retry of the transaction claims it afresh.
		return dialect.ClaimResult{}, dialect.Classified(dialect.ErrSerialization, errors.New("postgres: conflicting record vanished before it could be read"))
	}
	return dialect.ClaimResult{Record: rec}, nil
}

// lockTimeout renders the wait bound for lock_timeout; zero would mean "wait
// forever", so it is at least one millisecond.
func lockTimeout(d time.Duration) string {
	return strconv.FormatInt(max(d.Milliseconds(), 1), 10) + "ms"
}

// Complete stores the response on the in-flight record. In a transaction
// Driver.Begin made, the statement is held back and sent with COMMIT in one
// round trip, guarded so that it fails (and COMMIT never runs) when there is
// nothing to complete.
func (d *Dialect) Complete(ctx context.Context, q dialect.Queryer, t dialect.Table, a dialect.CompleteArgs) error {
	s := d.stmts.For(t)
	args := []any{a.Status, a.Header, a.Body, a.Scope, a.Key, a.Fingerprint, clock(a.Now), a.Retention.Microseconds()}
	if dq, ok := q.(deferrer); ok && dq.deferUntilCommit(s.completeGuarded, args) {
		return nil
	}
	n, err := q.Exec(ctx, s.complete, args...)
	if err != nil {
		return err
	}
	if n != 1 {
		return dialect.ErrNotClaimed
	}
	return nil
}

// Lookup reads the live record.
func (d *Dialect) Lookup(ctx context.Context, q dialect.Queryer, t dialect.Table, a dialect.LookupArgs) (dialect.Record, bool, error) {
	rec, expired, found, err := d.read(ctx, q, d.stmts.For(t), a.Scope, a.Key, clock(a.Now))
	if err != nil || !found || expired {
		return dialect.Record{}, false, err
	}
	return rec, true, nil
}

// read reads the record of a key and whether it has expired.
func (d *Dialect) read(ctx context.Context, q dialect.Queryer, s *statements, scope, key string, now any) (rec dialect.Record, expired, found bool, err error) {
	err = runOne(ctx, q, step{sql: s.read, args: []any{scope, key, now},
		rows: func(r rowReader) (err error) { rec, expired, found, err = scanRecord(r); return err }})
	return rec, expired, found, err
}

// scanRecord reads the columns of read and peek. Peek always returns one
// row, with NULLs when there is no record.
func scanRecord(r rowReader) (rec dialect.Record, expired, found bool, err error) {
	if !r.Next() {
		return rec, false, false, nil
	}
	var (
		scope, key       *string
		status           *int64
		header, body, fp []byte
		created, expires *time.Time
		expiredFlag      *bool
	)
	if err := r.Scan(&scope, &key, &fp, &status, &header, &body, &created, &expires, &expiredFlag); err != nil {
		return rec, false, false, err
	}
	if scope == nil || key == nil || created == nil || expires == nil || expiredFlag == nil {
		return rec, false, false, nil
	}
	rec.Scope, rec.Key, rec.Fingerprint, rec.Header, rec.Body = *scope, *key, fp, header, body
	rec.State = dialect.InFlight
	if status != nil {
		rec.State, rec.Status = dialect.Completed, int(*status)
	}
	rec.CreatedAt, rec.ExpiresAt = created.UTC(), expires.UTC()
	return rec, *expiredFlag, true, nil
}

// PurgeBatch deletes up to a.Limit expired rows that no other transaction
// holds, in a transaction of its own.
func (d *Dialect) PurgeBatch(ctx context.Context, begin func(context.Context) (dialect.Tx, error), t dialect.Table, a dialect.PurgeArgs) (int64, error) {
	tx, err := begin(ctx)
	if err != nil {
		return 0, err
	}
	n, err := tx.Exec(ctx, d.stmts.For(t).purge, clock(a.Now), a.Limit)
	if err != nil {
		_ = tx.Rollback(context.WithoutCancel(ctx))
		return 0, err
	}
	return n, tx.Commit(ctx)
}

// SQLSTATE codes the dialect maps (see PostgreSQL's errcodes appendix).
const (
	uniqueViolation            = "23505"
	serializationFailure       = "40001"
	deadlockDetected           = "40P01"
	lockNotAvailable           = "55P03"
	queryCanceled              = "57014"
	readOnlyTransaction        = "25006"
	inFailedTransaction        = "25P02"
	statementCompletionUnknown = "40003" // CockroachDB: the COMMIT may or may not have happened
	characterNotInRepertoire   = "22021"
	untranslatableCharacter    = "22P05"
	programLimitExceeded       = "54000"
)

// Classify maps SQLSTATE codes, and pgx's closed-transaction error, to the
// dialect meanings.
func (*Dialect) Classify(err error) error {
	if err == nil || dialect.IsClassified(err) {
		return err
	}
	if errors.Is(err, pgx.ErrTxClosed) {
		return dialect.Classified(dialect.ErrTxDone, err)
	}
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		return err
	}
	switch pe.Code {
	case uniqueViolation:
		return dialect.Classified(dialect.ErrUniqueViolation, err)
	case serializationFailure:
		return dialect.Classified(dialect.ErrSerialization, err)
	case deadlockDetected:
		return dialect.Classified(dialect.ErrDeadlock, err)
	case statementCompletionUnknown:
		return dialect.Classified(dialect.ErrCommitUnknown, err)
	case lockNotAvailable, queryCanceled:
		// 57014 is statement_timeout or a cancel; a cancelled context is
		// told apart by the caller's ctx.Err().
		return dialect.Classified(dialect.ErrLockTimeout, err)
	case readOnlyTransaction:
		return dialect.Classified(dialect.ErrReadOnly, err)
	case inFailedTransaction:
		return dialect.Classified(dialect.ErrBadTx, err)
	case characterNotInRepertoire, untranslatableCharacter:
		return dialect.Classified(dialect.ErrInvalidValue, err)
	case programLimitExceeded:
		return dialect.Classified(dialect.ErrTooLarge, err)
	}
	return err
}

// commitError classifies an error from COMMIT: a server error or one raised
// before anything was sent is a known failure; anything else (the
// connection broke after COMMIT left) leaves the outcome unknown.
func commitError(err error) error {
	if err == nil {
		return nil
	}
	// pgconn.SafeToRetry cannot tell here: once the connection is gone pgx
	// reports even an answer lost after COMMIT left as safe to retry.
	// Without the server's answer the outcome is unknown.
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		if pe.Code == statementCompletionUnknown {
			return dialect.Classified(dialect.ErrCommitUnknown, err)
		}
		return err
	}
	if errors.Is(err, pgx.ErrTxCommitRollback) || errors.Is(err, pgx.ErrTxClosed) {
		return err
	}
	return dialect.Classified(dialect.ErrCommitUnknown, err)
}

func clock(now time.Time) any {
	if now.IsZero() {
		return nil
	}
	return now.UTC()
}

// setLockTimeout saves the transaction's lock_timeout in a custom setting
// and sets the claim's wait bound, both for this transaction only.
const setLockTimeout = `SELECT set_config('idem.saved_lock_timeout', current_setting('lock_timeout'), true),
	set_config('lock_timeout', $1, true)`

// restoreLockTimeout puts the caller's lock_timeout back after the claim.
const restoreLockTimeout = `SELECT set_config('lock_timeout', current_setting('idem.saved_lock_timeout'), true)`

// statements is the SQL for one table.
type statements struct {
	createTable, createIndex                   string
	claim, takeover, complete, completeGuarded string
	read, peek, purge                          string
}

func newStatements(t dialect.Table) *statements {
	n := `"` + t.Name() + `"`
	const now = `COALESCE($4::timestamptz, statement_timestamp())`
	const readNow = `COALESCE($3::timestamptz, statement_timestamp())`
	const columns = `scope, idem_key, fingerprint, status, header, body, created_at, expires_at`
	read := `SELECT ` + columns + `, expires_at <= ` + readNow + ` FROM ` + n + ` WHERE scope = $1 AND idem_key = $2`
	// $7 now (NULL: the database's clock), $8 retention in microseconds:
	// a completed record lives the retention after its completion.
	complete := `UPDATE ` + n + ` SET status = $1, header = $2, body = $3,
	expires_at = COALESCE($7::timestamptz, statement_timestamp()) + $8::bigint * interval '1 microsecond'
WHERE scope = $4 AND idem_key = $5 AND fingerprint = $6 AND status IS NULL`
	return &statements{
		createTable: `CREATE TABLE IF NOT EXISTS ` + n + ` (
	scope       text COLLATE "C" NOT NULL,
	idem_key    text COLLATE "C" NOT NULL,
	fingerprint bytea       NOT NULL,
	status      smallint,            -- NULL while in flight
	header      bytea,
	body        bytea,
	created_at  timestamptz NOT NULL,
	expires_at  timestamptz NOT NULL,
	PRIMARY KEY (scope, idem_key)
)`,
		createIndex: `CREATE INDEX IF NOT EXISTS "` + t.Index("expires") + `" ON ` + n + ` (expires_at)`,

		// $1 scope, $2 key, $3 fingerprint, $4 now (NULL: the database's
		// clock), $5 retention in microseconds, $6 the wait bound.
		//
		// The subqueries save the caller's lock_timeout and set the wait
		// bound before the row is inserted, so a wait for a transaction
		// holding the key is bounded (OFFSET 0 keeps them from being
		// merged into the outer query). RETURNING, evaluated only for the
		// inserted row, restores it; after a conflict peek does.
		claim: `INSERT INTO ` + n + ` (scope, idem_key, fingerprint, created_at, expires_at)
SELECT $1::text, $2::text, $3::bytea, ` + now + `, ` + now + ` + $5::bigint * interval '1 microsecond'
FROM (SELECT set_config('lock_timeout', $6, true)
	FROM (SELECT set_config('idem.saved_lock_timeout', current_setting('lock_timeout'), true) OFFSET 0) saved
	OFFSET 0) bounded
ON CONFLICT (scope, idem_key) DO NOTHING
RETURNING set_config('lock_timeout', current_setting('idem.saved_lock_timeout'), true)`,

		takeover: `UPDATE ` + n + ` SET fingerprint = $3, status = NULL, header = NULL, body = NULL,
	created_at = ` + now + `, expires_at = ` + now + ` + $5::bigint * interval '1 microsecond'
WHERE scope = $1 AND idem_key = $2 AND expires_at <= ` + now + `
RETURNING true`,

		complete: complete,

		// The same UPDATE, made to fail when it updated no row, so a
		// pipeline that sends COMMIT after it stops before the COMMIT.
		completeGuarded: `WITH completed AS (` + complete + ` RETURNING 1)
SELECT 1 / count(*) FROM completed`,

		// $1 scope, $2 key, $3 now.
		read: read,

		// After a claim that lost: restores the caller's lock_timeout and
		// reads the record the claim lost to. $1 scope, $2 key, $3 now.
		// Always one row; NULLs when there is no record.
		peek: `SELECT r.scope, r.idem_key, r.fingerprint, r.status, r.header, r.body, r.created_at, r.expires_at,
	r.expires_at <= ` + readNow + `
FROM (SELECT set_config('lock_timeout', current_setting('idem.saved_lock_timeout'), true) OFFSET 0) restored
LEFT JOIN ` + n + ` r ON r.scope = $1 AND r.idem_key = $2`,

		purge: `DELETE FROM ` + n + ` WHERE ctid = ANY (ARRAY(
	SELECT ctid FROM ` + n + ` WHERE expires_at <= COALESCE($1::timestamptz, statement_timestamp())
	LIMIT $2 FOR UPDATE SKIP LOCKED))
AND expires_at <= COALESCE($1::timestamptz, statement_timestamp())`,
	}
}
