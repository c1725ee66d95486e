package postgres

import (
	"context"
	"database/sql"
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
	wait, err := bind(s.lockWait, sql.Named("wait", lockTimeout(a.WaitBound)))
	if err != nil {
		return false, err
	}
	insert, err := bind(s.insert, sql.Named("scope", a.Scope), sql.Named("key", a.Key), sql.Named("fingerprint", a.Fingerprint),
		sql.Named("now", clock(a.Now)), sql.Named("retention_us", a.Retention.Microseconds()), sql.Named("lease_us", a.Lease.Microseconds()))
	if err != nil {
		return false, err
	}
	var won bool
	insert.Rows = func(r dialect.Rows) error { won = r.Next(); return nil }
	if err := dialect.Pipeline(ctx, q, wait, insert); err != nil || !won {
		return false, err
	}
	stamp, err := bind(s.stampToken, sql.Named("scope", a.Scope), sql.Named("key", a.Key))
	if err != nil {
		return false, err
	}
	if _, err := q.Exec(ctx, stamp.SQL, stamp.Args...); err != nil {
		return false, err
	}
	return true, nil
}

// TakeExpired takes over a record whose retention has passed.
func (d *postgresDialect) TakeExpired(ctx context.Context, q dialect.Queryer, t dialect.Table, a dialect.LeaseArgs) (bool, error) {
	s := d.stmts.For(t).lease
	n, err := d.bounded(ctx, q, s.lockWait, a.WaitBound, s.takeExpired,
		sql.Named("scope", a.Scope), sql.Named("key", a.Key), sql.Named("fingerprint", a.Fingerprint),
		sql.Named("now", clock(a.Now)), sql.Named("retention_us", a.Retention.Microseconds()), sql.Named("lease_us", a.Lease.Microseconds()))
	return n == 1, err
}

// ResumeLease takes over a pending record whose lease ended.
func (d *postgresDialect) ResumeLease(ctx context.Context, q dialect.Queryer, t dialect.Table, a dialect.LeaseArgs) (bool, error) {
	s := d.stmts.For(t).lease
	n, err := d.bounded(ctx, q, s.lockWait, a.WaitBound, s.resume,
		sql.Named("scope", a.Scope), sql.Named("key", a.Key), sql.Named("fingerprint", a.Fingerprint),
		sql.Named("now", clock(a.Now)), sql.Named("lease_us", a.Lease.Microseconds()))
	return n == 1, err
}

// bounded runs a takeover with the claim's wait bound (set by lockWait)
// for the rest of the core's transaction.
func (d *postgresDialect) bounded(ctx context.Context, q dialect.Queryer, lockWait dialect.Query, wait time.Duration, takeover dialect.Query, named ...sql.NamedArg) (int64, error) {
	bound, err := bind(lockWait, sql.Named("wait", lockTimeout(wait)))
	if err != nil {
		return 0, err
	}
	take, err := bind(takeover, named...)
	if err != nil {
		return 0, err
	}
	var n int64
	take.Affected = func(affected int64) error { n = affected; return nil }
	err = dialect.Pipeline(ctx, q, bound, take)
	return n, err
}

// fenceArgs are the named values of every fenced statement ("fenced" in
// queries/_parts.sql, and the clock), then more.
func fenceArgs(a dialect.FenceArgs, more ...sql.NamedArg) []sql.NamedArg {
	return append([]sql.NamedArg{sql.Named("scope", a.Scope), sql.Named("key", a.Key), sql.Named("token", a.Token),
		sql.Named("fingerprint", a.Fingerprint), sql.Named("now", clock(a.Now))}, more...)
}

// ExtendLease moves the lease's end.
func (d *postgresDialect) ExtendLease(ctx context.Context, q dialect.Queryer, t dialect.Table, a dialect.FenceArgs) (time.Time, error) {
	return fencedUntil(ctx, q, d.stmts.For(t).lease.extend, fenceArgs(a, sql.Named("lease_us", a.Lease.Microseconds())))
}

// RecordStep stores a recovery point and extends the lease.
func (d *postgresDialect) RecordStep(ctx context.Context, q dialect.Queryer, t dialect.Table, a dialect.StepArgs) (time.Time, error) {
	return fencedUntil(ctx, q, d.stmts.For(t).lease.step, fenceArgs(a.FenceArgs,
		sql.Named("lease_us", a.Lease.Microseconds()), sql.Named("step", a.Step), sql.Named("step_data", a.Data)))
}

// CompleteLease stores the response and ends the lease.
func (d *postgresDialect) CompleteLease(ctx context.Context, q dialect.Queryer, t dialect.Table, a dialect.CompleteLeaseArgs) error {
	return fenced(ctx, q, d.stmts.For(t).lease.complete, fenceArgs(a.FenceArgs,
		sql.Named("status", a.Status), sql.Named("header", a.Header), sql.Named("body", a.Body),
		sql.Named("retention_us", a.Retention.Microseconds())))
}

// ReleaseLease ends the lease now, keeping the work's state.
func (d *postgresDialect) ReleaseLease(ctx context.Context, q dialect.Queryer, t dialect.Table, a dialect.FenceArgs) error {
	return fenced(ctx, q, d.stmts.For(t).lease.release, fenceArgs(a))
}

// ExpiredLeases lists pending records whose lease ended within their
// retention.
func (d *postgresDialect) ExpiredLeases(ctx context.Context, q dialect.Queryer, t dialect.Table, a dialect.ExpiredLeasesArgs) ([]dialect.Record, error) {
	expired, err := bind(d.stmts.For(t).lease.expired, sql.Named("now", clock(a.Now)), sql.Named("limit", a.Limit))
	if err != nil {
		return nil, err
	}
	var out []dialect.Record
	expired.Rows = func(r dialect.Rows) error {
		for r.Next() {
			rec, _, _, err := scanColumns(r)
			if err != nil {
				return err
			}
			out = append(out, rec)
		}
		return nil
	}
	err = dialect.Run(ctx, q, expired)
	return out, err
}

// fencedUntil runs a fenced UPDATE ... RETURNING lease_until: the lease's
// new end, or ErrLeaseLost when no row matched.
func fencedUntil(ctx context.Context, q dialect.Queryer, stmt dialect.Query, named []sql.NamedArg) (time.Time, error) {
	s, err := bind(stmt, named...)
	if err != nil {
		return time.Time{}, err
	}
	var (
		until time.Time
		held  bool
	)
	s.Rows = func(r dialect.Rows) error {
		if held = r.Next(); held {
			return r.Scan(&until)
		}
		return nil
	}
	err = dialect.Run(ctx, q, s)
	if err == nil && !held {
		return time.Time{}, dialect.ErrLeaseLost
	}
	return until.UTC(), err
}

// fenced runs a fenced UPDATE and turns its row count into ErrLeaseLost.
func fenced(ctx context.Context, q dialect.Queryer, stmt dialect.Query, named []sql.NamedArg) error {
	s, err := bind(stmt, named...)
	if err != nil {
		return err
	}
	n, err := q.Exec(ctx, s.SQL, s.Args...)
	if err == nil && n != 1 {
		return dialect.ErrLeaseLost
	}
	return err
}
