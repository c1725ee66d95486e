package mysql

import (
	"context"
	"errors"
	"strconv"
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
	now, ret, lease := clock(a.Now), a.Retention.Microseconds(), a.Lease.Microseconds()
	err = d.waitBounded(ctx, q, a.WaitBound, func(prefix string) error {
		_, err := exec(ctx, q, prefix+s.lease.insert, a.Scope, a.Key, a.Fingerprint, ret, lease, lease, now)
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

// stampToken gives the record this transaction holds a token above its own
// and the floor. The floor is read by a plain (consistent, lockless) read
// now that the row is held: every delete of the key's earlier records has
// committed.
func (d *mysqlDialect) stampToken(ctx context.Context, q dialect.Queryer, s *statements, scope, key string) error {
	floor, err := queryInt64(ctx, q, s.readFloor)
	if err != nil {
		return err
	}
	_, err = exec(ctx, q, s.lease.stampToken, floor, scope, key)
	return err
}

// TakeExpired takes over a record whose retention has passed.
func (d *mysqlDialect) TakeExpired(ctx context.Context, q dialect.Queryer, t dialect.Table, a dialect.LeaseArgs) (won bool, err error) {
	s := d.stmts.For(t)
	now, ret, lease := clock(a.Now), a.Retention.Microseconds(), a.Lease.Microseconds()
	err = d.waitBounded(ctx, q, a.WaitBound, func(prefix string) error {
		n, err := exec(ctx, q, prefix+s.lease.takeExpired,
			a.Fingerprint, now, now, ret, now, lease, now, lease, a.Scope, a.Key, now)
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
	s := d.stmts.For(t).lease
	now, lease := clock(a.Now), a.Lease.Microseconds()
	err = d.waitBounded(ctx, q, a.WaitBound, func(prefix string) error {
		n, err := exec(ctx, q, prefix+s.resume,
			now, lease, now, lease, a.Scope, a.Key, a.Fingerprint, now, now)
		won = n == 1
		return err
	})
	return won, err
}

// ExtendLease moves the lease's end.
func (d *mysqlDialect) ExtendLease(ctx context.Context, q dialect.Queryer, t dialect.Table, a dialect.FenceArgs) (time.Time, error) {
	s := d.stmts.For(t).lease
	now, lease := clock(a.Now), a.Lease.Microseconds()
	if _, err := exec(ctx, q, s.extend, append([]any{now, lease, now, lease}, fence(a)...)...); err != nil {
		return time.Time{}, err
	}
	return d.until(ctx, q, s, a)
}

// RecordStep stores a recovery point and extends the lease.
func (d *mysqlDialect) RecordStep(ctx context.Context, q dialect.Queryer, t dialect.Table, a dialect.StepArgs) (time.Time, error) {
	s := d.stmts.For(t).lease
	now, lease := clock(a.Now), a.Lease.Microseconds()
	if _, err := exec(ctx, q, s.step, append([]any{now, lease, now, lease, a.Step, a.Data}, fence(a.FenceArgs)...)...); err != nil {
		return time.Time{}, err
	}
	return d.until(ctx, q, s, a.FenceArgs)
}

// CompleteLease stores the response and ends the lease.
func (d *mysqlDialect) CompleteLease(ctx context.Context, q dialect.Queryer, t dialect.Table, a dialect.CompleteLeaseArgs) error {
	if err := d.fits(a.Header, a.Body); err != nil {
		return err
	}
	s := d.stmts.For(t).lease
	n, err := exec(ctx, q, s.complete, append([]any{a.Status, a.Header, a.Body, clock(a.Now), a.Retention.Microseconds()}, fence(a.FenceArgs)...)...)
	return d.fenced(ctx, q, s, a.FenceArgs, n, err)
}

// ReleaseLease ends the lease now, keeping the work's state.
func (d *mysqlDialect) ReleaseLease(ctx context.Context, q dialect.Queryer, t dialect.Table, a dialect.FenceArgs) error {
	s := d.stmts.For(t).lease
	n, err := exec(ctx, q, s.release, append([]any{clock(a.Now)}, fence(a)...)...)
	return d.fenced(ctx, q, s, a, n, err)
}

// fence is the arguments of the fenced WHERE clause.
func fence(a dialect.FenceArgs) []any { return []any{a.Scope, a.Key, a.Token, a.Fingerprint} }

// ExpiredLeases lists pending records whose lease ended within their
// retention.
func (d *mysqlDialect) ExpiredLeases(ctx context.Context, q dialect.Queryer, t dialect.Table, a dialect.ExpiredLeasesArgs) ([]dialect.Record, error) {
	now := clock(a.Now)
	rows, err := query(ctx, q, d.stmts.For(t).lease.expired, now, now, now, a.Limit)
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
func (d *mysqlDialect) fenced(ctx context.Context, q dialect.Queryer, s leaseStatements, a dialect.FenceArgs, n int64, err error) error {
	if err != nil || n == 1 {
		return err
	}
	rows, err := query(ctx, q, s.held, fence(a)...)
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
func (d *mysqlDialect) until(ctx context.Context, q dialect.Queryer, s leaseStatements, a dialect.FenceArgs) (time.Time, error) {
	rows, err := query(ctx, q, s.until, fence(a)...)
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
// Claim does: on MariaDB fn prefixes its statements with SET STATEMENT; on
// MySQL the session's innodb_lock_wait_timeout is set around fn and put
// back.
func (d *mysqlDialect) waitBounded(ctx context.Context, q dialect.Queryer, wait time.Duration, fn func(prefix string) error) (err error) {
	secs := lockWaitSeconds(wait)
	if d.perStatementWait {
		return fn("SET STATEMENT innodb_lock_wait_timeout=" + strconv.FormatInt(secs, 10) + " FOR ")
	}
	if _, err := exec(ctx, q, setLockWait, secs); err != nil {
		return err
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		if _, rerr := q.Exec(rctx, restoreLockWait); rerr != nil && err == nil {
			err = rerr
		}
	}()
	return fn("")
}
