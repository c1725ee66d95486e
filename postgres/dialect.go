package postgres

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemkit/idem/dialect"
)

// Dialect is PostgreSQL's statements and SQLSTATE mapping, shared by both
// drivers. It caches the statement text per table.
type Dialect struct {
	stmts sync.Map // table name -> *statements
}

var _ dialect.Dialect = (*Dialect)(nil)

// NewDialect returns the PostgreSQL dialect.
func NewDialect() *Dialect { return &Dialect{} }

// Name returns "postgres".
func (*Dialect) Name() string { return "postgres" }

// Capabilities: row-level locks, so a loser waits on the key only.
func (*Dialect) Capabilities() dialect.Capabilities { return dialect.Capabilities{} }

// Schema returns the CREATE TABLE and CREATE INDEX statements.
func (d *Dialect) Schema(t dialect.Table) []string {
	s := d.statements(t)
	return []string{s.createTable, s.createIndex}
}

// Claim sets the wait bound, runs the claiming upsert, restores the
// caller's lock_timeout and, for a loser, reads the record.
func (d *Dialect) Claim(ctx context.Context, q dialect.Queryer, t dialect.Table, a dialect.ClaimArgs) (dialect.ClaimResult, error) {
	s := d.statements(t)
	if _, err := q.Exec(ctx, setLockTimeout, lockTimeout(a.WaitBound)); err != nil {
		return dialect.ClaimResult{}, err
	}
	now := clock(a.Now)
	rows, err := q.Query(ctx, s.claim, a.Scope, a.Key, a.Fingerprint, now, a.Retention.Microseconds())
	if err != nil {
		return dialect.ClaimResult{}, err
	}
	won := rows.Next()
	if err := closeRows(rows); err != nil {
		return dialect.ClaimResult{}, err
	}
	if _, err := q.Exec(ctx, restoreLockTimeout); err != nil {
		return dialect.ClaimResult{}, err
	}
	if won {
		return dialect.ClaimResult{Won: true}, nil
	}
	rec, found, err := d.lookup(ctx, q, s, a.Scope, a.Key, now)
	if err != nil {
		return dialect.ClaimResult{}, err
	}
	if !found {
		// The conflicting row expired or was purged between the two
		// statements: a retry of the transaction takes it over.
		return dialect.ClaimResult{}, dialect.Classified(dialect.ErrSerialization, errors.New("postgres: conflicting record vanished before it could be read"))
	}
	return dialect.ClaimResult{Record: rec}, nil
}

// lockTimeout renders the wait bound for lock_timeout; zero would mean "wait
// forever", so it is at least one millisecond.
func lockTimeout(d time.Duration) string {
	return fmt.Sprintf("%dms", max(d.Milliseconds(), 1))
}

// Complete stores the response on the in-flight record.
func (d *Dialect) Complete(ctx context.Context, q dialect.Queryer, t dialect.Table, a dialect.CompleteArgs) error {
	n, err := q.Exec(ctx, d.statements(t).complete, a.Status, a.Header, a.Body, a.Scope, a.Key, a.Fingerprint)
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
	return d.lookup(ctx, q, d.statements(t), a.Scope, a.Key, clock(a.Now))
}

func (d *Dialect) lookup(ctx context.Context, q dialect.Queryer, s *statements, scope, key string, now any) (dialect.Record, bool, error) {
	rows, err := q.Query(ctx, s.lookup, scope, key, now)
	if err != nil {
		return dialect.Record{}, false, err
	}
	defer rows.Close()
	if !rows.Next() {
		return dialect.Record{}, false, closeRows(rows)
	}
	var (
		rec              dialect.Record
		status           *int64
		header, body, fp []byte
	)
	if err := rows.Scan(&rec.Scope, &rec.Key, &fp, &status, &header, &body, &rec.CreatedAt, &rec.ExpiresAt); err != nil {
		return dialect.Record{}, false, err
	}
	rec.Fingerprint, rec.Header, rec.Body = fp, header, body
	rec.State = dialect.InFlight
	if status != nil {
		rec.State, rec.Status = dialect.Completed, int(*status)
	}
	rec.CreatedAt, rec.ExpiresAt = rec.CreatedAt.UTC(), rec.ExpiresAt.UTC()
	return rec, true, closeRows(rows)
}

// PurgeBatch deletes up to a.Limit expired rows that no other transaction
// holds, in a transaction of its own.
func (d *Dialect) PurgeBatch(ctx context.Context, begin func(context.Context) (dialect.Tx, error), t dialect.Table, a dialect.PurgeArgs) (int64, error) {
	tx, err := begin(ctx)
	if err != nil {
		return 0, err
	}
	n, err := tx.Exec(ctx, d.statements(t).purge, clock(a.Now), a.Limit)
	if err != nil {
		_ = tx.Rollback(context.WithoutCancel(ctx))
		return 0, err
	}
	return n, tx.Commit(ctx)
}

// SQLSTATE codes the dialect maps (see PostgreSQL's errcodes appendix).
const (
	uniqueViolation          = "23505"
	serializationFailure     = "40001"
	deadlockDetected         = "40P01"
	lockNotAvailable         = "55P03"
	queryCanceled            = "57014"
	readOnlyTransaction      = "25006"
	inFailedTransaction      = "25P02"
	characterNotInRepertoire = "22021"
	untranslatableCharacter  = "22P05"
	programLimitExceeded     = "54000"
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
	var pe *pgconn.PgError
	if errors.As(err, &pe) || errors.Is(err, pgx.ErrTxCommitRollback) || errors.Is(err, pgx.ErrTxClosed) || pgconn.SafeToRetry(err) {
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

func closeRows(rows dialect.Rows) error {
	if err := rows.Err(); err != nil {
		rows.Close()
		return err
	}
	return rows.Close()
}

// setLockTimeout saves the transaction's lock_timeout in a custom setting
// and sets the claim's wait bound, both for this transaction only.
const setLockTimeout = `SELECT set_config('idem.saved_lock_timeout', current_setting('lock_timeout'), true),
	set_config('lock_timeout', $1, true)`

// restoreLockTimeout puts the caller's lock_timeout back after the claim.
const restoreLockTimeout = `SELECT set_config('lock_timeout', current_setting('idem.saved_lock_timeout'), true)`

// statements is the SQL for one table.
type statements struct {
	createTable, createIndex       string
	claim, complete, lookup, purge string
}

func (d *Dialect) statements(t dialect.Table) *statements {
	if s, ok := d.stmts.Load(t.Name()); ok {
		return s.(*statements)
	}
	s, _ := d.stmts.LoadOrStore(t.Name(), newStatements(t))
	return s.(*statements)
}

func newStatements(t dialect.Table) *statements {
	n := `"` + t.Name() + `"`
	const now = `COALESCE($4::timestamptz, statement_timestamp())`
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
		// clock), $5 retention in microseconds.
		claim: `INSERT INTO ` + n + ` AS r (scope, idem_key, fingerprint, created_at, expires_at)
VALUES ($1, $2, $3, ` + now + `, ` + now + ` + $5::bigint * interval '1 microsecond')
ON CONFLICT (scope, idem_key) DO UPDATE SET
	fingerprint = EXCLUDED.fingerprint, status = NULL, header = NULL, body = NULL,
	created_at = EXCLUDED.created_at, expires_at = EXCLUDED.expires_at
WHERE r.expires_at <= EXCLUDED.created_at
RETURNING true`,

		complete: `UPDATE ` + n + ` SET status = $1, header = $2, body = $3
WHERE scope = $4 AND idem_key = $5 AND fingerprint = $6 AND status IS NULL`,

		lookup: `SELECT scope, idem_key, fingerprint, status, header, body, created_at, expires_at
FROM ` + n + ` WHERE scope = $1 AND idem_key = $2 AND expires_at > COALESCE($3::timestamptz, statement_timestamp())`,

		purge: `DELETE FROM ` + n + ` WHERE ctid = ANY (ARRAY(
	SELECT ctid FROM ` + n + ` WHERE expires_at <= COALESCE($1::timestamptz, statement_timestamp())
	LIMIT $2 FOR UPDATE SKIP LOCKED))
AND expires_at <= COALESCE($1::timestamptz, statement_timestamp())`,
	}
}
