package mysql

import (
	"context"
	"errors"

	"github.com/idemkit/idem/dialect"
)

// The operator's statements (dialect.Admin), built by dialect.AdminSQL
// with ? placeholders and DATETIME(6) times read as Unix microseconds, and
// sent like the dialect's other statements (values inlined as hex literals
// when small). Scopes and keys are VARBINARY, so a prefix filter is a byte
// range the primary key serves.

var _ dialect.Admin = (*mysqlDialect)(nil)

var adminSQL = dialect.AdminSQL{
	Name:         "mysql",
	Placeholders: dialect.Question,
	Quote:        func(name string) string { return "`" + name + "`" },
	Now:          now,
	Ago:          now + ` - INTERVAL ? MICROSECOND`,
	Length:       func(col string) string { return `LENGTH(` + col + `)` },
	Micros:       micros,
}

// inlining sends the admin statements as the dialect sends its others.
type inlining struct{ dialect.Queryer }

func (q inlining) Exec(ctx context.Context, stmt string, args ...any) (int64, error) {
	return exec(ctx, q.Queryer, stmt, args...)
}

func (q inlining) Query(ctx context.Context, stmt string, args ...any) (dialect.Rows, error) {
	return query(ctx, q.Queryer, stmt, args...)
}

// Inspect reads the record of a key, live or expired.
func (d *mysqlDialect) Inspect(ctx context.Context, q dialect.Queryer, t dialect.Table, a dialect.LookupArgs) (dialect.RecordInfo, bool, error) {
	return adminSQL.Inspect(ctx, inlining{q}, t, a)
}

// List returns a page of records matching a's filters.
func (d *mysqlDialect) List(ctx context.Context, q dialect.Queryer, t dialect.Table, a dialect.ListArgs) ([]dialect.RecordInfo, error) {
	return adminSQL.List(ctx, inlining{q}, t, a)
}

// Count counts records by state and expiry.
func (d *mysqlDialect) Count(ctx context.Context, q dialect.Queryer, t dialect.Table, a dialect.CountArgs) ([]dialect.StateCount, error) {
	return adminSQL.Count(ctx, inlining{q}, t, a)
}

// Delete deletes one record by primary key; unless forced, not a live
// pending one, and raises the token floor to its token. A record whose
// claim is still open holds its row lock, so the locking read waits for
// that transaction, bounded by ctx (and the session's
// innodb_lock_wait_timeout).
func (d *mysqlDialect) Delete(ctx context.Context, q dialect.Queryer, t dialect.Table, a dialect.DeleteArgs) (int64, error) {
	// MySQL's DELETE returns no rows: a locking read takes the record and
	// its token, then the DELETE removes it and the floor is raised, all
	// in the core's transaction.
	lock, args, err := adminSQL.LockDeletableSQL(t, a, "FOR UPDATE")
	if err != nil {
		return 0, err
	}
	rows, err := query(ctx, q, lock, args...)
	if err != nil {
		return 0, err
	}
	var token int64
	found := rows.Next()
	if found {
		err = rows.Scan(&token)
	}
	if err := errors.Join(err, dialect.CloseRows(rows)); err != nil || !found {
		return 0, err
	}
	del, args, err := adminSQL.DeleteSQL(t, dialect.DeleteArgs{Scope: a.Scope, Key: a.Key, Force: true}, "")
	if err != nil {
		return 0, err
	}
	if d.fence != nil {
		// Behind vtgate the floor is raised on a session of its own
		// (fenceSession): it must be in place before the delete commits.
		if err := d.raiseFloor(ctx, q, d.stmts.For(t), token); err != nil {
			return 0, err
		}
		return exec(ctx, q, del, args...)
	}
	n, err := exec(ctx, q, del, args...)
	if err != nil {
		return 0, err
	}
	return n, d.raiseFloor(ctx, q, d.stmts.For(t), token)
}
