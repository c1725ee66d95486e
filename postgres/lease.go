package postgres

import (
	"context"
	"time"

	"github.com/idemkit/idem/dialect"
)

// Lease mode on PostgreSQL. The core runs each method in a short READ
// COMMITTED transaction of its own, so a takeover that waited for another's
// row lock re-reads the row and finds its condition false: one winner.

var _ dialect.Leaser = (*postgresDialect)(nil)

// InsertLease inserts a pending record holding a lease unless the key has
// one, then stamps its token above the floor. The lease claim's
// transaction is the core's own, so the wait bound is set for all of it
// (set_config is transaction-local) and never restored.
func (d *postgresDialect) InsertLease(ctx context.Context, q dialect.Queryer, t dialect.Table, a dialect.LeaseArgs) (bool, error) {
	s := d.stmts.For(t).lease
	var won bool
	err := dialect.Pipeline(ctx, q,
		dialect.Statement{SQL: `SELECT set_config('lock_timeout', $1, true)`, Args: []any{lockTimeout(a.WaitBound)}},
		dialect.Statement{
			SQL:  s.insert,
			Args: []any{a.Scope, a.Key, a.Fingerprint, clock(a.Now), a.Retention.Microseconds(), a.Lease.Microseconds()},
			Rows: func(r dialect.Rows) error { won = r.Next(); return nil },
		})
	if err != nil || !won {
		return false, err
	}
	if _, err := q.Exec(ctx, s.stampToken, a.Scope, a.Key); err != nil {
		return false, err
	}
	return true, nil
}

// TakeExpired takes over a record whose retention has passed.
func (d *postgresDialect) TakeExpired(ctx context.Context, q dialect.Queryer, t dialect.Table, a dialect.LeaseArgs) (bool, error) {
	n, err := d.bounded(ctx, q, a.WaitBound, d.stmts.For(t).lease.takeExpired,
		a.Scope, a.Key, a.Fingerprint, clock(a.Now), a.Retention.Microseconds(), a.Lease.Microseconds())
	return n == 1, err
}

// ResumeLease takes over a pending record whose lease ended.
func (d *postgresDialect) ResumeLease(ctx context.Context, q dialect.Queryer, t dialect.Table, a dialect.LeaseArgs) (bool, error) {
	n, err := d.bounded(ctx, q, a.WaitBound, d.stmts.For(t).lease.resume,
		a.Scope, a.Key, a.Fingerprint, clock(a.Now), a.Lease.Microseconds())
	return n == 1, err
}

// bounded runs a takeover with the claim's wait bound for the rest of the
// core's transaction.
func (d *postgresDialect) bounded(ctx context.Context, q dialect.Queryer, wait time.Duration, stmt string, args ...any) (int64, error) {
	var n int64
	err := dialect.Pipeline(ctx, q,
		dialect.Statement{SQL: `SELECT set_config('lock_timeout', $1, true)`, Args: []any{lockTimeout(wait)}},
		dialect.Statement{SQL: stmt, Args: args, Affected: func(affected int64) error { n = affected; return nil }})
	return n, err
}

// fenceArgs are the arguments every fenced statement starts with.
func fenceArgs(a dialect.FenceArgs, more ...any) []any {
	return append([]any{a.Scope, a.Key, a.Token, a.Fingerprint, clock(a.Now)}, more...)
}

// ExtendLease moves the lease's end.
func (d *postgresDialect) ExtendLease(ctx context.Context, q dialect.Queryer, t dialect.Table, a dialect.FenceArgs) (time.Time, error) {
	return fencedUntil(ctx, q, d.stmts.For(t).lease.extend, fenceArgs(a, a.Lease.Microseconds()))
}

// RecordStep stores a recovery point and extends the lease.
func (d *postgresDialect) RecordStep(ctx context.Context, q dialect.Queryer, t dialect.Table, a dialect.StepArgs) (time.Time, error) {
	return fencedUntil(ctx, q, d.stmts.For(t).lease.step, fenceArgs(a.FenceArgs, a.Lease.Microseconds(), a.Step, a.Data))
}

// CompleteLease stores the response and ends the lease.
func (d *postgresDialect) CompleteLease(ctx context.Context, q dialect.Queryer, t dialect.Table, a dialect.CompleteLeaseArgs) error {
	return fenced(q.Exec(ctx, d.stmts.For(t).lease.complete,
		fenceArgs(a.FenceArgs, a.Status, a.Header, a.Body, a.Retention.Microseconds())...))
}

// ReleaseLease ends the lease now, keeping the work's state.
func (d *postgresDialect) ReleaseLease(ctx context.Context, q dialect.Queryer, t dialect.Table, a dialect.FenceArgs) error {
	return fenced(q.Exec(ctx, d.stmts.For(t).lease.release, fenceArgs(a)...))
}

// ExpiredLeases lists pending records whose lease ended within their
// retention.
func (d *postgresDialect) ExpiredLeases(ctx context.Context, q dialect.Queryer, t dialect.Table, a dialect.ExpiredLeasesArgs) ([]dialect.Record, error) {
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

// fencedUntil runs a fenced UPDATE ... RETURNING lease_until: the lease's
// new end, or ErrLeaseLost when no row matched.
func fencedUntil(ctx context.Context, q dialect.Queryer, stmt string, args []any) (time.Time, error) {
	var (
		until time.Time
		held  bool
	)
	err := dialect.Run(ctx, q, dialect.Statement{SQL: stmt, Args: args, Rows: func(r dialect.Rows) error {
		if held = r.Next(); held {
			return r.Scan(&until)
		}
		return nil
	}})
	if err == nil && !held {
		return time.Time{}, dialect.ErrLeaseLost
	}
	return until.UTC(), err
}

// fenced turns a fenced UPDATE's row count into ErrLeaseLost.
func fenced(n int64, err error) error {
	if err == nil && n != 1 {
		return dialect.ErrLeaseLost
	}
	return err
}
