package postgres

import (
	"context"

	"github.com/idemkit/idem/dialect"
)

// Lease mode on PostgreSQL. The core runs each method in a short READ
// COMMITTED transaction of its own, so a takeover that waited for another's
// row lock re-reads the row and finds its condition false: one winner.

var _ dialect.Leaser = (*Dialect)(nil)

// InsertLease inserts a pending record holding a lease unless the key has
// one. The lease claim's transaction is the core's own, so the wait bound
// is set for all of it (set_config is transaction-local) and never
// restored: it bounds the takeover that may follow too.
func (d *Dialect) InsertLease(ctx context.Context, q dialect.Queryer, t dialect.Table, a dialect.LeaseArgs) (bool, error) {
	var won bool
	err := dialect.Pipeline(ctx, q,
		dialect.Statement{SQL: `SELECT set_config('lock_timeout', $1, true)`, Args: []any{lockTimeout(a.WaitBound)}},
		dialect.Statement{
			SQL:  d.stmts.For(t).lease.insert,
			Args: []any{a.Scope, a.Key, a.Fingerprint, clock(a.Now), a.Retention.Microseconds(), a.Lease.Microseconds()},
			Rows: func(r dialect.Rows) error { won = r.Next(); return nil },
		})
	return won, err
}

// TakeLease takes over a record whose retention has passed, else one whose
// lease ended.
func (d *Dialect) TakeLease(ctx context.Context, q dialect.Queryer, t dialect.Table, a dialect.LeaseArgs) (won, resumed bool, err error) {
	s := d.stmts.For(t).lease
	n, err := q.Exec(ctx, s.takeExpired, a.Scope, a.Key, a.Fingerprint, clock(a.Now), a.Retention.Microseconds(), a.Lease.Microseconds())
	if err != nil || n == 1 {
		return n == 1, false, err
	}
	n, err = q.Exec(ctx, s.resume, a.Scope, a.Key, a.Fingerprint, clock(a.Now), a.Lease.Microseconds())
	return n == 1, n == 1, err
}

// ExtendLease moves the lease's end.
func (d *Dialect) ExtendLease(ctx context.Context, q dialect.Queryer, t dialect.Table, a dialect.FenceArgs) error {
	return fenced(q.Exec(ctx, d.stmts.For(t).lease.extend, a.Scope, a.Key, a.Token, clock(a.Now), a.Lease.Microseconds()))
}

// RecordStep stores a recovery point and extends the lease.
func (d *Dialect) RecordStep(ctx context.Context, q dialect.Queryer, t dialect.Table, a dialect.StepArgs) error {
	return fenced(q.Exec(ctx, d.stmts.For(t).lease.step, a.Scope, a.Key, a.Token, clock(a.Now), a.Lease.Microseconds(), a.Step, a.Data))
}

// CompleteLease stores the response and ends the lease.
func (d *Dialect) CompleteLease(ctx context.Context, q dialect.Queryer, t dialect.Table, a dialect.CompleteLeaseArgs) error {
	return fenced(q.Exec(ctx, d.stmts.For(t).lease.complete,
		a.Scope, a.Key, a.Token, clock(a.Now), a.Status, a.Header, a.Body, a.Retention.Microseconds()))
}

// ReleaseLease ends the lease now, keeping the work's state.
func (d *Dialect) ReleaseLease(ctx context.Context, q dialect.Queryer, t dialect.Table, a dialect.FenceArgs) error {
	return fenced(q.Exec(ctx, d.stmts.For(t).lease.release, a.Scope, a.Key, a.Token, clock(a.Now)))
}

// ExpiredLeases lists pending records whose lease ended within their
// retention.
func (d *Dialect) ExpiredLeases(ctx context.Context, q dialect.Queryer, t dialect.Table, a dialect.ExpiredLeasesArgs) ([]dialect.Record, error) {
	var out []dialect.Record
	err := dialect.Run(ctx, q, dialect.Statement{
		SQL:  d.stmts.For(t).lease.expired,
		Args: []any{clock(a.Now), a.Limit},
		Rows: func(r dialect.Rows) error {
			for r.Next() {
				rec, _, _, err := scanColumns(r)
				if err != nil {
					return err
				}
				out = append(out, rec)
			}
			return nil
		},
	})
	return out, err
}

// fenced turns a fenced UPDATE's row count into ErrLeaseLost.
func fenced(n int64, err error) error {
	if err == nil && n != 1 {
		return dialect.ErrLeaseLost
	}
	return err
}
