package mysql

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/idemkit/idem/dialect"
)

// Lease mode on MySQL and MariaDB. The core runs each method in a short
// READ COMMITTED transaction of its own; an UPDATE reads the latest
// committed row (InnoDB's current read) after any lock wait, so of two
// takeovers one wins. A lost insert is error 1062, which rolls back only
// that statement.

var _ dialect.Leaser = (*mysqlDialect)(nil)

// InsertLease inserts a pending record holding a lease unless the key has
// one, waiting at most a.WaitBound for a transaction that holds the key,
// then stamps its token above the floor. A lost insert writes nothing
// more in its transaction: it holds a shared lock on the existing row, and
// a write after it would deadlock with other losers doing the same.
func (d *mysqlDialect) InsertLease(ctx context.Context, q dialect.Queryer, t dialect.Table, a dialect.LeaseArgs) (won bool, err error) {
	s := d.stmts.For(t)
	err = d.waitBounded(ctx, q, s, a.WaitBound, func(bound func(dialect.Query) dialect.Query) error {
		_, err := execNamed(ctx, q, bound(s.lease.insert), leaseArgs(a, true)...)
		return err
	})
	if isNumber(err, erDupEntry) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return true, d.stampToken(ctx, q, s, a.Scope, a.Key)
}

// leaseArgs are the parameters of a lease claim: its key, fingerprint,
// clock and lease, and, for a new record, its retention.
func leaseArgs(a dialect.LeaseArgs, retention bool) []sql.NamedArg {
	named := []sql.NamedArg{sql.Named("scope", a.Scope), sql.Named("key", a.Key), sql.Named("fingerprint", a.Fingerprint),
		sql.Named("now", clock(a.Now)), sql.Named("lease_us", a.Lease.Microseconds())}
	if retention {
		named = append(named, sql.Named("retention_us", a.Retention.Microseconds()))
	}
	return named
}

// stampToken gives the record this transaction holds a token above its own
// and the floor. The floor is read by a plain (consistent, lockless) read
// now that the row is held: every delete of the key's earlier records has
// committed.
func (d *mysqlDialect) stampToken(ctx context.Context, q dialect.Queryer, s *statements, scope, key string) error {
	read := s.floorRead.SQL
	if d.fence != nil {
		read = uncached(read)
	}
	floor, err := queryInt64(ctx, d.fenceSession(q), read)
	if err != nil {
		return err
	}
	_, err = execNamed(ctx, q, s.lease.stampToken, sql.Named("scope", scope), sql.Named("key", key), sql.Named("floor", floor))
	return err
}

// TakeExpired takes over a record whose retention has passed.
func (d *mysqlDialect) TakeExpired(ctx context.Context, q dialect.Queryer, t dialect.Table, a dialect.LeaseArgs) (won bool, err error) {
	s := d.stmts.For(t)
	err = d.waitBounded(ctx, q, s, a.WaitBound, func(bound func(dialect.Query) dialect.Query) error {
		n, err := execNamed(ctx, q, bound(s.lease.takeExpired), leaseArgs(a, true)...)
		won = n == 1
		return err
	})
	if err != nil || !won {
		return false, err
	}
	return true, d.stampToken(ctx, q, s, a.Scope, a.Key)
}

// ResumeLease takes over a pending record whose lease ended.
func (d *mysqlDialect) ResumeLease(ctx context.Context, q dialect.Queryer, t dialect.Table, a dialect.LeaseArgs) (won bool, err error) {
	s := d.stmts.For(t)
	err = d.waitBounded(ctx, q, s, a.WaitBound, func(bound func(dialect.Query) dialect.Query) error {
		n, err := execNamed(ctx, q, bound(s.lease.resume), leaseArgs(a, false)...)
		won = n == 1
		return err
	})
	return won, err
}

// ExtendLease moves the lease's end.
func (d *mysqlDialect) ExtendLease(ctx context.Context, q dialect.Queryer, t dialect.Table, a dialect.FenceArgs) (time.Time, error) {
	s := &d.stmts.For(t).lease
	named := append(fence(a), sql.Named("now", clock(a.Now)), sql.Named("lease_us", a.Lease.Microseconds()))
	if _, err := execNamed(ctx, q, s.extend, named...); err != nil {
		return time.Time{}, err
	}
	return d.until(ctx, q, s, a)
}

// RecordStep stores a recovery point and extends the lease.
func (d *mysqlDialect) RecordStep(ctx context.Context, q dialect.Queryer, t dialect.Table, a dialect.StepArgs) (time.Time, error) {
	s := &d.stmts.For(t).lease
	named := append(fence(a.FenceArgs), sql.Named("now", clock(a.Now)), sql.Named("lease_us", a.Lease.Microseconds()),
		sql.Named("step", a.Step), sql.Named("step_data", a.Data))
	if _, err := execNamed(ctx, q, s.step, named...); err != nil {
		return time.Time{}, err
	}
	return d.until(ctx, q, s, a.FenceArgs)
}

// CompleteLease stores the response and ends the lease.
func (d *mysqlDialect) CompleteLease(ctx context.Context, q dialect.Queryer, t dialect.Table, a dialect.CompleteLeaseArgs) error {
	if err := d.fits(a.Header, a.Body); err != nil {
		return err
	}
	s := &d.stmts.For(t).lease
	named := append(fence(a.FenceArgs), sql.Named("now", clock(a.Now)), sql.Named("retention_us", a.Retention.Microseconds()),
		sql.Named("status", a.Status), sql.Named("header", a.Header), sql.Named("body", a.Body))
	n, err := execNamed(ctx, q, s.complete, named...)
	return d.fenced(ctx, q, s, a.FenceArgs, n, err)
}

// ReleaseLease ends the lease now, keeping the work's state.
func (d *mysqlDialect) ReleaseLease(ctx context.Context, q dialect.Queryer, t dialect.Table, a dialect.FenceArgs) error {
	s := &d.stmts.For(t).lease
	n, err := execNamed(ctx, q, s.release, append(fence(a), sql.Named("now", clock(a.Now)))...)
	return d.fenced(ctx, q, s, a, n, err)
}

// fence is the parameters of the fenced WHERE clause (the "fenced" part of
// queries/_parts.sql), in a new slice the caller may append to.
func fence(a dialect.FenceArgs) []sql.NamedArg {
	return []sql.NamedArg{sql.Named("scope", a.Scope), sql.Named("key", a.Key),
		sql.Named("token", a.Token), sql.Named("fingerprint", a.Fingerprint)}
}

// ExpiredLeases lists pending records whose lease ended within their
// retention.
func (d *mysqlDialect) ExpiredLeases(ctx context.Context, q dialect.Queryer, t dialect.Table, a dialect.ExpiredLeasesArgs) ([]dialect.Record, error) {
	rows, err := queryNamed(ctx, q, d.stmts.For(t).lease.expired, sql.Named("now", clock(a.Now)), sql.Named("limit", a.Limit))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []dialect.Record
	for rows.Next() {
		rec, _, err := scanRecord(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, rec)
	}
	return out, dialect.CloseRows(rows)
}

// fenced turns a fenced UPDATE's row count into ErrLeaseLost. go-sql-driver
// counts changed rows, not matched ones, unless the DSN sets
// clientFoundRows: an UPDATE that set what was already there reports 0, so
// 0 is checked with a read of the holder's row (locked by the UPDATE).
func (d *mysqlDialect) fenced(ctx context.Context, q dialect.Queryer, s *leaseStatements, a dialect.FenceArgs, n int64, err error) error {
	if err != nil || n == 1 {
		return err
	}
	rows, err := queryNamed(ctx, q, s.held, fence(a)...)
	if err != nil {
		return err
	}
	held := rows.Next()
	if err := dialect.CloseRows(rows); err != nil {
		return err
	}
	if !held {
		return dialect.ErrLeaseLost
	}
	return nil
}

// until reads the lease's end after an extension, which also tells
// whether the holder's record is there (go-sql-driver's row count cannot:
// see fenced).
func (d *mysqlDialect) until(ctx context.Context, q dialect.Queryer, s *leaseStatements, a dialect.FenceArgs) (time.Time, error) {
	rows, err := queryNamed(ctx, q, s.until, fence(a)...)
	if err != nil {
		return time.Time{}, err
	}
	var us *int64
	held := rows.Next()
	if held {
		err = rows.Scan(&us)
	}
	if err := errors.Join(err, dialect.CloseRows(rows)); err != nil {
		return time.Time{}, err
	}
	if !held || us == nil {
		return time.Time{}, dialect.ErrLeaseLost
	}
	return time.UnixMicro(*us).UTC(), nil
}

// waitBounded runs fn with InnoDB's lock wait bounded by wait, the way
// Claim does: where one statement can be bounded (waitBound, without
// Claim's innodb_snapshot_isolation=OFF), fn bounds its statements with
// bound; on MySQL the session's
// innodb_lock_wait_timeout is set around fn and put back (sessionWait),
// and bound leaves a statement as it is.
func (d *mysqlDialect) waitBounded(ctx context.Context, q dialect.Queryer, s *statements, wait time.Duration, fn func(bound func(dialect.Query) dialect.Query) error) (err error) {
	if d.perStatementWait {
		bound, _ := d.waitBound(wait, false)
		return fn(bound)
	}
	restore, err := d.sessionWait(ctx, q, s, lockWaitSeconds(wait))
	if err != nil {
		return err
	}
	defer func() {
		if rerr := restore(); rerr != nil && err == nil {
			err = rerr
		}
	}()
	return fn(func(q dialect.Query) dialect.Query { return q })
}
