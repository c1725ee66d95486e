package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/idemkit/idem/dialect"
)

// sqliteDialect is SQLite's statements and error mapping. It caches the statement
// text per table, so no request rebuilds it.
type sqliteDialect struct {
	stmts *dialect.Statements[statements]
}

var _ dialect.Dialect = (*sqliteDialect)(nil)

// NewDialect returns the SQLite dialect, for drivers other than Driver (a
// different database/sql wrapper around modernc.org/sqlite).
func NewDialect() dialect.Dialect { return newDialect() }

func newDialect() *sqliteDialect { return &sqliteDialect{stmts: dialect.NewStatements(newStatements)} }

// Name returns "sqlite".
func (*sqliteDialect) Name() string { return "sqlite" }

// Capabilities reports that writers wait on the whole database.
func (*sqliteDialect) Capabilities() dialect.Capabilities {
	return dialect.Capabilities{DatabaseWriteLock: true}
}

// Schema returns the versioned DDL (migrations/*.sql).
func (d *sqliteDialect) Schema(t dialect.Table) dialect.Schema { return d.stmts.For(t).schema }

// Claim inserts the pending record, or takes over an expired one, in one
// upsert whose RETURNING yields a row only when this statement wrote it.
// The transaction already holds SQLite's write lock (BEGIN IMMEDIATE), so a
// loser reads the latest committed record with a plain SELECT.
func (d *sqliteDialect) Claim(ctx context.Context, q dialect.Queryer, t dialect.Table, a dialect.ClaimArgs) (dialect.ClaimResult, error) {
	s := d.stmts.For(t)
	now := clock(a.Now)
	rows, err := query(ctx, q, s.claim, sql.Named("scope", a.Scope), sql.Named("key", a.Key),
		sql.Named("fingerprint", a.Fingerprint), sql.Named("now", now), sql.Named("retention_us", a.Retention.Microseconds()))
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
	rec, found, err := d.read(ctx, q, s, a.Scope, a.Key, now)
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

// Complete stores the response on the pending record. The first statement
// leaves the expiry (and its index) alone and matches when the claim's
// expiry already covers the retention after now; only work that ran past
// the claim's grace runs the second, which moves it.
func (d *sqliteDialect) Complete(ctx context.Context, q dialect.Queryer, t dialect.Table, a dialect.CompleteArgs) error {
	s := d.stmts.For(t)
	for _, stmt := range []dialect.Query{s.complete, s.completeLate} {
		n, err := exec(ctx, q, stmt, sql.Named("scope", a.Scope), sql.Named("key", a.Key),
			sql.Named("fingerprint", a.Fingerprint), sql.Named("status", a.Status), sql.Named("header", a.Header),
			sql.Named("body", a.Body), sql.Named("now", clock(a.Now)), sql.Named("retention_us", a.Retention.Microseconds()))
		if err != nil || n == 1 {
			return err
		}
	}
	return dialect.ErrNotClaimed
}

// Lookup reads the live record.
func (d *sqliteDialect) Lookup(ctx context.Context, q dialect.Queryer, t dialect.Table, a dialect.LookupArgs) (dialect.Record, bool, error) {
	return d.read(ctx, q, d.stmts.For(t), a.Scope, a.Key, clock(a.Now))
}

// read runs queries/read.sql: the live record of scope and key.
func (d *sqliteDialect) read(ctx context.Context, q dialect.Queryer, s *statements, scope, key string, now any) (dialect.Record, bool, error) {
	rows, err := query(ctx, q, s.read, sql.Named("scope", scope), sql.Named("key", key), sql.Named("now", now))
	if err != nil {
		return dialect.Record{}, false, err
	}
	defer rows.Close()
	if !rows.Next() {
		return dialect.Record{}, false, dialect.CloseRows(rows)
	}
	rec, err := scanRecord(rows)
	if err != nil {
		return dialect.Record{}, false, err
	}
	return rec, true, dialect.CloseRows(rows)
}

// scanRecord reads the current row's columns (queries/_parts.sql's
// "columns").
func scanRecord(rows dialect.Rows) (dialect.Record, error) {
	var (
		rec              dialect.Record
		status, lease    *int64
		created, expires int64
		step             *string
	)
	if err := rows.Scan(&rec.Scope, &rec.Key, &rec.Fingerprint, &status, &rec.Header, &rec.Body, &created, &expires,
		&rec.Token, &lease, &step, &rec.StepData, &rec.LeaseExpired); err != nil {
		return rec, err
	}
	rec.State = dialect.Pending
	if status != nil {
		rec.State, rec.Status = dialect.Completed, int(*status)
	}
	rec.CreatedAt, rec.ExpiresAt = time.UnixMicro(created).UTC(), time.UnixMicro(expires).UTC()
	if lease != nil {
		rec.LeaseUntil = time.UnixMicro(*lease).UTC()
	}
	if step != nil {
		rec.Step = *step
	}
	return rec, nil
}

// Purge deletes up to a.Limit expired records and raises the token floor
// to the largest token among them. SQLite has no row locks to skip: the
// core's transaction took the write lock at BEGIN like any writer, and
// keeps it only for this one bounded DELETE.
func (d *sqliteDialect) Purge(ctx context.Context, q dialect.Queryer, t dialect.Table, a dialect.PurgeArgs) (int64, error) {
	rows, err := query(ctx, q, d.stmts.For(t).purge, sql.Named("now", clock(a.Now)), sql.Named("limit", a.Limit))
	if err != nil {
		return 0, err
	}
	return d.raiseFloor(ctx, q, t, rows)
}

// clock returns the store's time in Unix microseconds, or nil so the
// statement uses the database's clock.
func clock(now time.Time) any {
	if now.IsZero() {
		return nil
	}
	return now.UnixMicro()
}
