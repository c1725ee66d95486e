package sqlite

import (
	"context"
	"database/sql"
	"time"

	"github.com/idemkit/idem/dialect"
)

// Lease mode on SQLite. The core runs each method in a transaction of its
// own that took the database's write lock at BEGIN, so these statements
// never wait on each other's rows, and the token floor read inside a
// statement cannot be overtaken by a delete.

var _ dialect.Leaser = (*sqliteDialect)(nil)

// InsertLease inserts a pending record holding a lease, unless the key has
// a record.
func (d *sqliteDialect) InsertLease(ctx context.Context, q dialect.Queryer, t dialect.Table, a dialect.LeaseArgs) (bool, error) {
	rows, err := query(ctx, q, d.stmts.For(t).lease.insert, sql.Named("scope", a.Scope), sql.Named("key", a.Key),
		sql.Named("fingerprint", a.Fingerprint), sql.Named("now", clock(a.Now)),
		sql.Named("retention_us", a.Retention.Microseconds()), sql.Named("lease_us", a.Lease.Microseconds()))
	if err != nil {
		return false, err
	}
	won := rows.Next()
	return won, dialect.CloseRows(rows)
}

// TakeExpired takes over a record whose retention has passed.
func (d *sqliteDialect) TakeExpired(ctx context.Context, q dialect.Queryer, t dialect.Table, a dialect.LeaseArgs) (bool, error) {
	n, err := exec(ctx, q, d.stmts.For(t).lease.takeExpired, sql.Named("scope", a.Scope), sql.Named("key", a.Key),
		sql.Named("fingerprint", a.Fingerprint), sql.Named("now", clock(a.Now)),
		sql.Named("retention_us", a.Retention.Microseconds()), sql.Named("lease_us", a.Lease.Microseconds()))
	return n == 1, err
}

// ResumeLease takes over a pending record whose lease expired.
func (d *sqliteDialect) ResumeLease(ctx context.Context, q dialect.Queryer, t dialect.Table, a dialect.LeaseArgs) (bool, error) {
	n, err := exec(ctx, q, d.stmts.For(t).lease.resume, sql.Named("scope", a.Scope), sql.Named("key", a.Key),
		sql.Named("fingerprint", a.Fingerprint), sql.Named("now", clock(a.Now)), sql.Named("lease_us", a.Lease.Microseconds()))
	return n == 1, err
}

// ExtendLease moves the lease's end.
func (d *sqliteDialect) ExtendLease(ctx context.Context, q dialect.Queryer, t dialect.Table, a dialect.FenceArgs) (time.Time, error) {
	return fencedUntil(query(ctx, q, d.stmts.For(t).lease.extend, sql.Named("scope", a.Scope), sql.Named("key", a.Key),
		sql.Named("token", a.Token), sql.Named("fingerprint", a.Fingerprint), sql.Named("now", clock(a.Now)),
		sql.Named("lease_us", a.Lease.Microseconds())))
}

// RecordStep stores a recovery point and extends the lease.
func (d *sqliteDialect) RecordStep(ctx context.Context, q dialect.Queryer, t dialect.Table, a dialect.StepArgs) (time.Time, error) {
	return fencedUntil(query(ctx, q, d.stmts.For(t).lease.step, sql.Named("scope", a.Scope), sql.Named("key", a.Key),
		sql.Named("token", a.Token), sql.Named("fingerprint", a.Fingerprint), sql.Named("now", clock(a.Now)),
		sql.Named("lease_us", a.Lease.Microseconds()), sql.Named("step", a.Step), sql.Named("step_data", a.Data)))
}

// CompleteLease stores the response and ends the lease.
func (d *sqliteDialect) CompleteLease(ctx context.Context, q dialect.Queryer, t dialect.Table, a dialect.CompleteLeaseArgs) error {
	return fenced(exec(ctx, q, d.stmts.For(t).lease.complete, sql.Named("scope", a.Scope), sql.Named("key", a.Key),
		sql.Named("token", a.Token), sql.Named("fingerprint", a.Fingerprint), sql.Named("now", clock(a.Now)),
		sql.Named("status", a.Status), sql.Named("header", a.Header), sql.Named("body", a.Body),
		sql.Named("retention_us", a.Retention.Microseconds())))
}

// ReleaseLease ends the lease now, keeping the work's state.
func (d *sqliteDialect) ReleaseLease(ctx context.Context, q dialect.Queryer, t dialect.Table, a dialect.FenceArgs) error {
	return fenced(exec(ctx, q, d.stmts.For(t).lease.release, sql.Named("scope", a.Scope), sql.Named("key", a.Key),
		sql.Named("token", a.Token), sql.Named("fingerprint", a.Fingerprint), sql.Named("now", clock(a.Now))))
}

// ExpiredLeases lists pending records whose lease expired within their
// retention.
func (d *sqliteDialect) ExpiredLeases(ctx context.Context, q dialect.Queryer, t dialect.Table, a dialect.ExpiredLeasesArgs) ([]dialect.Record, error) {
	rows, err := query(ctx, q, d.stmts.For(t).lease.expired, sql.Named("now", clock(a.Now)), sql.Named("limit", a.Limit))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []dialect.Record
	for rows.Next() {
		rec, err := scanRecord(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, rec)
	}
	return out, dialect.CloseRows(rows)
}

// fencedUntil reads the rows of a fenced UPDATE ... RETURNING lease_until:
// the lease's new end, or ErrLeaseLost when no row matched.
func fencedUntil(rows dialect.Rows, err error) (time.Time, error) {
	if err != nil {
		return time.Time{}, err
	}
	defer rows.Close()
	if !rows.Next() {
		if err := dialect.CloseRows(rows); err != nil {
			return time.Time{}, err
		}
		return time.Time{}, dialect.ErrLeaseLost
	}
	var until int64
	if err := rows.Scan(&until); err != nil {
		return time.Time{}, err
	}
	return time.UnixMicro(until).UTC(), dialect.CloseRows(rows)
}

// fenced turns a fenced UPDATE's row count into ErrLeaseLost.
func fenced(n int64, err error) error {
	if err == nil && n != 1 {
		return dialect.ErrLeaseLost
	}
	return err
}

// raiseFloor raises the table's token floor to the largest token of the
// rows a DELETE ... RETURNING token returned, and reports how many there
// were.
func (d *sqliteDialect) raiseFloor(ctx context.Context, q dialect.Queryer, t dialect.Table, rows dialect.Rows) (int64, error) {
	var n, highest int64
	for rows.Next() {
		var token int64
		if err := rows.Scan(&token); err != nil {
			rows.Close()
			return 0, err
		}
		n, highest = n+1, max(highest, token)
	}
	if err := dialect.CloseRows(rows); err != nil {
		return 0, err
	}
	if highest > 0 {
		if _, err := exec(ctx, q, d.stmts.For(t).raiseFloor, sql.Named("token", highest)); err != nil {
			return 0, err
		}
	}
	return n, nil
}
