package sqlite

import (
	"context"
	"errors"
	"fmt"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/idemkit/idem/dialect"
)

// Dialect is SQLite's statements and error mapping. It caches the statement
// text per table, so no request rebuilds it.
type Dialect struct {
	stmts *dialect.Statements[statements]
}

var _ dialect.Dialect = (*Dialect)(nil)

// NewDialect returns the SQLite dialect, for drivers other than Driver (a
// different database/sql wrapper around modernc.org/sqlite).
func NewDialect() *Dialect { return &Dialect{stmts: dialect.NewStatements(newStatements)} }

// Name returns "sqlite".
func (*Dialect) Name() string { return "sqlite" }

// Capabilities: writers wait on the whole database.
func (*Dialect) Capabilities() dialect.Capabilities {
	return dialect.Capabilities{DatabaseWriteLock: true}
}

// Schema returns the CREATE TABLE and CREATE INDEX statements.
func (d *Dialect) Schema(t dialect.Table) []string {
	s := d.stmts.For(t)
	return []string{s.createTable, s.createIndex}
}

// Claim inserts the in-flight record, or takes over an expired one, in one
// upsert whose RETURNING yields a row only when this statement wrote it.
// The transaction already holds SQLite's write lock (BEGIN IMMEDIATE), so a
// loser reads the latest committed record with a plain SELECT.
func (d *Dialect) Claim(ctx context.Context, q dialect.Queryer, t dialect.Table, a dialect.ClaimArgs) (dialect.ClaimResult, error) {
	s := d.stmts.For(t)
	now := clock(a.Now)
	rows, err := query(ctx, q, s.claim, a.Scope, a.Key, a.Fingerprint, now, a.Retention.Microseconds())
	if err != nil {
		return dialect.ClaimResult{}, err
	}
	won := rows.Next()
	if err := dialect.CloseRows(rows); err != nil {
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
		// The conflicting row vanished between the two statements, which the
		// write lock rules out; report it as retryable rather than guess.
		return dialect.ClaimResult{}, dialect.Classified(dialect.ErrSerialization, errors.New("sqlite: claimed key has no live record"))
	}
	return dialect.ClaimResult{Record: rec}, nil
}

// Complete stores the response on the in-flight record.
func (d *Dialect) Complete(ctx context.Context, q dialect.Queryer, t dialect.Table, a dialect.CompleteArgs) error {
	n, err := exec(ctx, q, d.stmts.For(t).complete, a.Status, a.Header, a.Body, a.Scope, a.Key, a.Fingerprint, clock(a.Now), a.Retention.Microseconds())
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
	return d.lookup(ctx, q, d.stmts.For(t), a.Scope, a.Key, clock(a.Now))
}

func (d *Dialect) lookup(ctx context.Context, q dialect.Queryer, s *statements, scope, key string, now any) (dialect.Record, bool, error) {
	rows, err := query(ctx, q, s.lookup, scope, key, now)
	if err != nil {
		return dialect.Record{}, false, err
	}
	defer rows.Close()
	if !rows.Next() {
		return dialect.Record{}, false, dialect.CloseRows(rows)
	}
	var (
		rec              dialect.Record
		status           *int64
		created, expires int64
		header, body, fp []byte
	)
	if err := rows.Scan(&rec.Scope, &rec.Key, &fp, &status, &header, &body, &created, &expires); err != nil {
		return dialect.Record{}, false, err
	}
	rec.Fingerprint, rec.Header, rec.Body = fp, header, body
	rec.State = dialect.InFlight
	if status != nil {
		rec.State, rec.Status = dialect.Completed, int(*status)
	}
	rec.CreatedAt, rec.ExpiresAt = time.UnixMicro(created).UTC(), time.UnixMicro(expires).UTC()
	return rec, true, dialect.CloseRows(rows)
}

// PurgeBatch deletes up to a.Limit expired records in one IMMEDIATE
// transaction. SQLite has no row locks to skip: the batch waits for the write
// lock like any writer, and keeps it only for one bounded DELETE.
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

// Classify maps SQLite's extended result codes to the dialect meanings.
func (*Dialect) Classify(err error) error {
	if err == nil || dialect.IsClassified(err) {
		return err
	}
	var se *sqlite.Error
	if !errors.As(err, &se) {
		return err
	}
	code := se.Code()
	switch code {
	case sqlite3.SQLITE_BUSY_SNAPSHOT:
		// A deferred transaction read an older snapshot than the one it
		// must write on: only a retry of the whole transaction helps.
		return dialect.Classified(dialect.ErrSerialization, err)
	case sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY, sqlite3.SQLITE_CONSTRAINT_UNIQUE:
		return dialect.Classified(dialect.ErrUniqueViolation, err)
	}
	switch code & 0xff {
	case sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED:
		return dialect.Classified(dialect.ErrLockTimeout, err)
	case sqlite3.SQLITE_READONLY:
		return dialect.Classified(dialect.ErrReadOnly, err)
	case sqlite3.SQLITE_TOOBIG:
		return dialect.Classified(dialect.ErrTooLarge, err)
	}
	return err
}

// clock returns the store's time in Unix microseconds, or nil so the
// statement uses the database's clock.
func clock(now time.Time) any {
	if now.IsZero() {
		return nil
	}
	return now.UnixMicro()
}

// statements is the SQL for one table.
type statements struct {
	createTable, createIndex       string
	claim, complete, lookup, purge string
}

// dbNow is SQLite's clock in Unix microseconds. SQLite keeps 'now' fixed
// for the whole of one statement.
const dbNow = `CAST(unixepoch('subsec') * 1000000 AS INTEGER)`

func newStatements(t dialect.Table) *statements {
	n := `"` + t.Name() + `"`
	now := func(param string) string { return fmt.Sprintf("COALESCE(%s, %s)", param, dbNow) }
	return &statements{
		createTable: `CREATE TABLE IF NOT EXISTS ` + n + ` (
	scope       TEXT    NOT NULL,
	idem_key    TEXT    NOT NULL,
	fingerprint BLOB    NOT NULL,
	status      INTEGER,          -- NULL while in flight
	header      BLOB,
	body        BLOB,
	created_at  INTEGER NOT NULL, -- Unix microseconds, UTC
	expires_at  INTEGER NOT NULL, -- Unix microseconds, UTC
	PRIMARY KEY (scope, idem_key)
) WITHOUT ROWID`,
		createIndex: `CREATE INDEX IF NOT EXISTS "` + t.Index("expires") + `" ON ` + n + ` (expires_at)`,

		// ?1 scope, ?2 key, ?3 fingerprint, ?4 now (NULL: database clock),
		// ?5 retention in microseconds.
		claim: `INSERT INTO ` + n + ` AS r (scope, idem_key, fingerprint, status, header, body, created_at, expires_at)
VALUES (?1, ?2, ?3, NULL, NULL, NULL, ` + now("?4") + `, ` + now("?4") + ` + ?5)
ON CONFLICT (scope, idem_key) DO UPDATE SET
	fingerprint = excluded.fingerprint, status = NULL, header = NULL, body = NULL,
	created_at = excluded.created_at, expires_at = excluded.expires_at
WHERE r.expires_at <= excluded.created_at
RETURNING created_at`,

		// ?7 now (NULL: database clock), ?8 retention in microseconds: a
		// completed record lives the retention after its completion.
		complete: `UPDATE ` + n + ` SET status = ?1, header = ?2, body = ?3, expires_at = ` + now("?7") + ` + ?8
WHERE scope = ?4 AND idem_key = ?5 AND fingerprint = ?6 AND status IS NULL`,

		lookup: `SELECT scope, idem_key, fingerprint, status, header, body, created_at, expires_at
FROM ` + n + ` WHERE scope = ?1 AND idem_key = ?2 AND expires_at > ` + now("?3"),

		purge: `DELETE FROM ` + n + ` WHERE (scope, idem_key) IN (
	SELECT scope, idem_key FROM ` + n + ` WHERE expires_at <= ` + now("?1") + ` LIMIT ?2)`,
	}
}
