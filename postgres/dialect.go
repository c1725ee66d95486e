package postgres

import (
	"context"
	"database/sql"
	"errors"
	"strconv"
	"time"

	"github.com/idemkit/idem/dialect"
)

// postgresDialect is PostgreSQL's statements and SQLSTATE mapping, shared by both
// drivers. It caches the statement text per table.
type postgresDialect struct {
	stmts *dialect.Statements[statements]
}

var _ dialect.Dialect = (*postgresDialect)(nil)

// NewDialect returns the PostgreSQL dialect without a connection: for
// rendering the migrations (migrationfiles, the idem CLI). New and NewSQL
// make their own.
func NewDialect() dialect.Dialect { return newDialect() }

func newDialect() *postgresDialect {
	return &postgresDialect{stmts: dialect.NewStatements(newStatements)}
}

// Name returns "postgres".
func (*postgresDialect) Name() string { return "postgres" }

// Capabilities reports row-level locks: a loser waits on the key only.
func (*postgresDialect) Capabilities() dialect.Capabilities {
	return dialect.Capabilities{FailedStatementAborts: true}
}

// Schema returns the versioned DDL (migrations/*.sql).
func (d *postgresDialect) Schema(t dialect.Table) dialect.Schema { return d.stmts.For(t).schema }

// Claim inserts the record unless the key has one, with lock_timeout set to
// the wait bound for that statement only: the insert saves the caller's
// lock_timeout and sets the bound before it runs, and its RETURNING clause
// puts the caller's back once the row is in. A winner is done in that one
// statement (sent with BEGIN in one round trip when the transaction can
// pipeline). A loser's claim returned no row, so the bound is still set:
// its next statement restores it and reads the record the claim lost to. A
// loser whose record expired takes it over with a guarded UPDATE.
//
// The insert is ON CONFLICT DO NOTHING: a replay locks nothing and writes
// nothing, so it needs no transaction id and no WAL. It still waits for a
// transaction that holds the key (up to lock_timeout), and at REPEATABLE
// READ or SERIALIZABLE a conflict with a row the snapshot cannot see still
// raises 40001.
func (d *postgresDialect) Claim(ctx context.Context, q dialect.Queryer, t dialect.Table, a dialect.ClaimArgs) (dialect.ClaimResult, error) {
	s := d.stmts.For(t)
	scope, key := sql.Named("scope", a.Scope), sql.Named("key", a.Key)
	fp, now := sql.Named("fingerprint", a.Fingerprint), sql.Named("now", clock(a.Now))
	retention, wait := sql.Named("retention_us", a.Retention.Microseconds()), sql.Named("wait", lockTimeout(a.WaitBound))
	var (
		won, found, expired bool
		rec                 dialect.Record
	)
	claim, err := bind(s.claim, scope, key, fp, now, retention, wait)
	if err != nil {
		return dialect.ClaimResult{}, err
	}
	claim.Rows = func(r dialect.Rows) error { won = r.Next(); return nil }
	if err := dialect.Pipeline(ctx, q, claim); err != nil {
		return dialect.ClaimResult{}, err
	}
	if won {
		return dialect.ClaimResult{Won: true}, nil
	}
	peek, err := bind(s.peek, scope, key, now)
	if err != nil {
		return dialect.ClaimResult{}, err
	}
	peek.Rows = func(r dialect.Rows) (err error) { rec, expired, found, err = scanRecord(r); return err }
	if err := dialect.Run(ctx, q, peek); err != nil {
		return dialect.ClaimResult{}, err
	}
	if found && expired {
		// Take the expired record over. Two claimers may try: the second
		// waits for the first's row lock (bounded like the claim), then
		// finds the record live and loses.
		set, err := bind(s.lockWaitSet, wait)
		if err != nil {
			return dialect.ClaimResult{}, err
		}
		takeover, err := bind(s.takeover, scope, key, fp, now, retention)
		if err != nil {
			return dialect.ClaimResult{}, err
		}
		takeover.Rows = func(r dialect.Rows) error { won = r.Next(); return nil }
		restore, err := bind(s.lockWaitRestore)
		if err != nil {
			return dialect.ClaimResult{}, err
		}
		if err := dialect.Pipeline(ctx, q, set, takeover, restore); err != nil {
			return dialect.ClaimResult{}, err
		}
		if won {
			return dialect.ClaimResult{Won: true}, nil
		}
		if rec, expired, found, err = d.read(ctx, q, s, a.Scope, a.Key, a.Now); err != nil {
			return dialect.ClaimResult{}, err
		}
	}
	if !found || expired {
		// The conflicting row expired or was purged between the
		// statements: a retry of the transaction claims it afresh.
		return dialect.ClaimResult{}, dialect.Classified(dialect.ErrSerialization, errors.New("postgres: conflicting record vanished before it could be read"))
	}
	return dialect.ClaimResult{Record: rec}, nil
}

// lockTimeout renders the wait bound for lock_timeout; zero would mean "wait
// forever", so it is at least one millisecond.
func lockTimeout(d time.Duration) string {
	return strconv.FormatInt(max(d.Milliseconds(), 1), 10) + "ms"
}

// Complete stores the response on the pending record. When the transaction
// can send it with COMMIT (a dialect.CommitDeferrer: the pgx driver's), it
// is held back and guarded so that it fails, and COMMIT never runs, when
// there is nothing to complete.
func (d *postgresDialect) Complete(ctx context.Context, q dialect.Queryer, t dialect.Table, a dialect.CompleteArgs) error {
	s := d.stmts.For(t)
	named := []sql.NamedArg{
		sql.Named("status", a.Status), sql.Named("header", a.Header), sql.Named("body", a.Body),
		sql.Named("scope", a.Scope), sql.Named("key", a.Key), sql.Named("fingerprint", a.Fingerprint),
		sql.Named("now", clock(a.Now)), sql.Named("retention_us", a.Retention.Microseconds()),
	}
	guarded, err := bind(s.completeGuarded, named...)
	if err != nil {
		return err
	}
	if dialect.DeferToCommit(q, guarded) {
		return nil
	}
	complete, err := bind(s.complete, named...)
	if err != nil {
		return err
	}
	n, err := q.Exec(ctx, complete.SQL, complete.Args...)
	if err != nil {
		return err
	}
	if n != 1 {
		return dialect.ErrNotClaimed
	}
	return nil
}

// Lookup reads the live record.
func (d *postgresDialect) Lookup(ctx context.Context, q dialect.Queryer, t dialect.Table, a dialect.LookupArgs) (dialect.Record, bool, error) {
	rec, expired, found, err := d.read(ctx, q, d.stmts.For(t), a.Scope, a.Key, a.Now)
	if err != nil || !found || expired {
		return dialect.Record{}, false, err
	}
	return rec, true, nil
}

// read reads the record of a key and whether it has expired.
func (d *postgresDialect) read(ctx context.Context, q dialect.Queryer, s *statements, scope, key string, now time.Time) (rec dialect.Record, expired, found bool, err error) {
	read, err := bind(s.read, sql.Named("scope", scope), sql.Named("key", key), sql.Named("now", clock(now)))
	if err != nil {
		return rec, false, false, err
	}
	read.Rows = func(r dialect.Rows) (err error) { rec, expired, found, err = scanRecord(r); return err }
	err = dialect.Run(ctx, q, read)
	return rec, expired, found, err
}

// scanRecord reads the columns of read and peek. Peek always returns one
// row, with NULLs when there is no record.
func scanRecord(r dialect.Rows) (rec dialect.Record, expired, found bool, err error) {
	if !r.Next() {
		return rec, false, false, nil
	}
	return scanColumns(r)
}

// scanColumns reads the current row's columns (the part "columns" of
// queries/_parts.sql).
func scanColumns(r dialect.Rows) (rec dialect.Record, expired, found bool, err error) {
	var (
		scope, key, step        *string
		status, token           *int64
		header, body, fp, data  []byte
		created, expires, lease *time.Time
		expiredFlag, leaseEnded *bool
	)
	if err := r.Scan(&scope, &key, &fp, &status, &header, &body, &created, &expires, &expiredFlag,
		&token, &lease, &step, &data, &leaseEnded); err != nil {
		return rec, false, false, err
	}
	if scope == nil || key == nil || created == nil || expires == nil || expiredFlag == nil || token == nil {
		return rec, false, false, nil
	}
	rec.Scope, rec.Key, rec.Fingerprint, rec.Header, rec.Body = *scope, *key, fp, header, body
	rec.State = dialect.Pending
	if status != nil {
		rec.State, rec.Status = dialect.Completed, int(*status)
	}
	rec.CreatedAt, rec.ExpiresAt, rec.Token, rec.StepData = created.UTC(), expires.UTC(), *token, data
	if lease != nil {
		rec.LeaseUntil, rec.LeaseExpired = lease.UTC(), leaseEnded != nil && *leaseEnded
	}
	if step != nil {
		rec.Step = *step
	}
	return rec, *expiredFlag, true, nil
}

// Purge deletes up to a.Limit expired rows that no other transaction holds
// (FOR UPDATE SKIP LOCKED), in the core's READ COMMITTED transaction, and
// raises the token floor to the largest token among them.
func (d *postgresDialect) Purge(ctx context.Context, q dialect.Queryer, t dialect.Table, a dialect.PurgeArgs) (int64, error) {
	purge, err := bind(d.stmts.For(t).purge, sql.Named("now", clock(a.Now)), sql.Named("limit", a.Limit))
	if err != nil {
		return 0, err
	}
	return countRows(ctx, q, purge.SQL, purge.Args...)
}

// countRows runs a statement returning one count.
func countRows(ctx context.Context, q dialect.Queryer, stmt string, args ...any) (int64, error) {
	var n int64
	err := dialect.Run(ctx, q, dialect.Statement{SQL: stmt, Args: args, Rows: func(r dialect.Rows) error {
		if !r.Next() {
			return r.Err()
		}
		return r.Scan(&n)
	}})
	return n, err
}

func clock(now time.Time) any {
	if now.IsZero() {
		return nil
	}
	return now.UTC()
}
