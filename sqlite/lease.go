package sqlite

import (
	"context"
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
	rows, err := dialect.QueryPrepared(ctx, q, d.stmts.For(t).lease.insert, leaseArgs(a)...)
	if err != nil {
		return false, err
	}
	won := rows.Next()
	return won, dialect.CloseRows(rows)
}

// TakeExpired takes over a record whose retention has passed.
func (d *sqliteDialect) TakeExpired(ctx context.Context, q dialect.Queryer, t dialect.Table, a dialect.LeaseArgs) (bool, error) {
	n, err := dialect.ExecPrepared(ctx, q, d.stmts.For(t).lease.takeExpired, leaseArgs(a)...)
	return n == 1, err
}

// ResumeLease takes over a pending record whose lease expired.
func (d *sqliteDialect) ResumeLease(ctx context.Context, q dialect.Queryer, t dialect.Table, a dialect.LeaseArgs) (bool, error) {
	n, err := dialect.ExecPrepared(ctx, q, d.stmts.For(t).lease.resume, leaseArgs(a)...)
	return n == 1, err
}

// leaseArgs are the arguments of a lease claim's statements.
func leaseArgs(a dialect.LeaseArgs) []any {
	return []any{a.Scope, a.Key, a.Fingerprint, clock(a.Now), a.Retention.Microseconds(), a.Lease.Microseconds()}
}

// fenceArgs are the arguments every fenced statement starts with.
func fenceArgs(a dialect.FenceArgs, more ...any) []any {
	return append([]any{a.Scope, a.Key, a.Token, a.Fingerprint, clock(a.Now)}, more...)
}

// ExtendLease moves the lease's end.
func (d *sqliteDialect) ExtendLease(ctx context.Context, q dialect.Queryer, t dialect.Table, a dialect.FenceArgs) (time.Time, error) {
	return fencedUntil(ctx, q, d.stmts.For(t).lease.extend, fenceArgs(a, a.Lease.Microseconds()))
}

// RecordStep stores a recovery point and extends the lease.
func (d *sqliteDialect) RecordStep(ctx context.Context, q dialect.Queryer, t dialect.Table, a dialect.StepArgs) (time.Time, error) {
	return fencedUntil(ctx, q, d.stmts.For(t).lease.step, fenceArgs(a.FenceArgs, a.Lease.Microseconds(), a.Step, a.Data))
}

// CompleteLease stores the response and ends the lease.
func (d *sqliteDialect) CompleteLease(ctx context.Context, q dialect.Queryer, t dialect.Table, a dialect.CompleteLeaseArgs) error {
	return fenced(dialect.ExecPrepared(ctx, q, d.stmts.For(t).lease.complete,
		fenceArgs(a.FenceArgs, a.Status, a.Header, a.Body, a.Retention.Microseconds())...))
}

// ReleaseLease ends the lease now, keeping the work's state.
func (d *sqliteDialect) ReleaseLease(ctx context.Context, q dialect.Queryer, t dialect.Table, a dialect.FenceArgs) error {
	return fenced(dialect.ExecPrepared(ctx, q, d.stmts.For(t).lease.release, fenceArgs(a)...))
}

// ExpiredLeases lists pending records whose lease expired within their
// retention.
func (d *sqliteDialect) ExpiredLeases(ctx context.Context, q dialect.Queryer, t dialect.Table, a dialect.ExpiredLeasesArgs) ([]dialect.Record, error) {
	rows, err := dialect.QueryPrepared(ctx, q, d.stmts.For(t).lease.expired, clock(a.Now), a.Limit)
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

// fencedUntil runs a fenced UPDATE ... RETURNING lease_until: the lease's
// new end, or ErrLeaseLost when no row matched.
func fencedUntil(ctx context.Context, q dialect.Queryer, stmt string, args []any) (time.Time, error) {
	rows, err := dialect.QueryPrepared(ctx, q, stmt, args...)
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
		if _, err := dialect.ExecPrepared(ctx, q, d.stmts.For(t).raiseFloor, highest); err != nil {
			return 0, err
		}
	}
	return n, nil
}
