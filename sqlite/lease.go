package sqlite

import (
	"context"

	"github.com/idemkit/idem/dialect"
)

// Lease mode on SQLite. The core runs each method in a transaction of its
// own that took the database's write lock at BEGIN, so these statements
// never wait on each other's rows.

var _ dialect.Leaser = (*Dialect)(nil)

// InsertLease inserts a pending record holding a lease, unless the key has
// a record.
func (d *Dialect) InsertLease(ctx context.Context, q dialect.Queryer, t dialect.Table, a dialect.LeaseArgs) (bool, error) {
	rows, err := dialect.QueryPrepared(ctx, q, d.stmts.For(t).lease.insert,
		a.Scope, a.Key, a.Fingerprint, clock(a.Now), a.Retention.Microseconds(), a.Lease.Microseconds())
	if err != nil {
		return false, err
	}
	won := rows.Next()
	return won, dialect.CloseRows(rows)
}

// TakeLease takes over a record whose retention has passed, else one whose
// lease expired.
func (d *Dialect) TakeLease(ctx context.Context, q dialect.Queryer, t dialect.Table, a dialect.LeaseArgs) (won, resumed bool, err error) {
	s := d.stmts.For(t).lease
	args := []any{a.Scope, a.Key, a.Fingerprint, clock(a.Now), a.Retention.Microseconds(), a.Lease.Microseconds()}
	n, err := dialect.ExecPrepared(ctx, q, s.takeExpired, args...)
	if err != nil || n == 1 {
		return n == 1, false, err
	}
	n, err = dialect.ExecPrepared(ctx, q, s.resume, args...)
	return n == 1, n == 1, err
}

// ExtendLease moves the lease's end.
func (d *Dialect) ExtendLease(ctx context.Context, q dialect.Queryer, t dialect.Table, a dialect.FenceArgs) error {
	return fenced(dialect.ExecPrepared(ctx, q, d.stmts.For(t).lease.extend,
		a.Scope, a.Key, a.Token, clock(a.Now), a.Lease.Microseconds()))
}

// RecordStep stores a recovery point and extends the lease.
func (d *Dialect) RecordStep(ctx context.Context, q dialect.Queryer, t dialect.Table, a dialect.StepArgs) error {
	return fenced(dialect.ExecPrepared(ctx, q, d.stmts.For(t).lease.step,
		a.Scope, a.Key, a.Token, clock(a.Now), a.Lease.Microseconds(), a.Step, a.Data))
}

// CompleteLease stores the response and ends the lease.
func (d *Dialect) CompleteLease(ctx context.Context, q dialect.Queryer, t dialect.Table, a dialect.CompleteLeaseArgs) error {
	return fenced(dialect.ExecPrepared(ctx, q, d.stmts.For(t).lease.complete,
		a.Scope, a.Key, a.Token, clock(a.Now), a.Status, a.Header, a.Body, a.Retention.Microseconds()))
}

// ReleaseLease ends the lease now, keeping the work's state.
func (d *Dialect) ReleaseLease(ctx context.Context, q dialect.Queryer, t dialect.Table, a dialect.FenceArgs) error {
	return fenced(dialect.ExecPrepared(ctx, q, d.stmts.For(t).lease.release, a.Scope, a.Key, a.Token, clock(a.Now)))
}

// ExpiredLeases lists pending records whose lease expired within their
// retention.
func (d *Dialect) ExpiredLeases(ctx context.Context, q dialect.Queryer, t dialect.Table, a dialect.ExpiredLeasesArgs) ([]dialect.Record, error) {
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

// fenced turns a fenced UPDATE's row count into ErrLeaseLost.
func fenced(n int64, err error) error {
	if err == nil && n != 1 {
		return dialect.ErrLeaseLost
	}
	return err
}
