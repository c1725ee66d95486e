package mysql

import (
	"context"
	"errors"
	"fmt"
	"time"

	sq "github.com/Masterminds/squirrel"

	"github.com/idemkit/idem/dialect"
)

// The operator's statements (dialect.Admin). Their filters vary from call
// to call, so they are built per call with squirrel, with ? placeholders,
// and sent like the dialect's other statements (values inlined as hex
// literals when small). Scopes and keys are VARBINARY, so a prefix filter
// is a byte range the primary key serves.

var _ dialect.Admin = (*mysqlDialect)(nil)

var adminSQL = sq.StatementBuilder.PlaceholderFormat(sq.Question)

// ago is now minus a parameter in microseconds.
const ago = now + ` - INTERVAL ? MICROSECOND`

func quoted(t dialect.Table) string { return "`" + t.Name() + "`" }

// adminSelect selects the columns infos reads; times as Unix microseconds.
func adminSelect(t dialect.Table, clk any) sq.SelectBuilder {
	return adminSQL.Select("scope", "idem_key", "fingerprint", "status",
		"COALESCE(LENGTH(header), 0)", "COALESCE(LENGTH(body), 0)",
		micros("created_at"), micros("expires_at"), "token", micros("lease_until"), "step").
		Column(sq.Expr(micros(now), clk)).
		From(quoted(t))
}

// scopePrefix narrows b to scopes with the prefix.
func scopePrefix[B interface{ Where(any, ...any) B }](b B, prefix string) B {
	if prefix == "" {
		return b
	}
	lo, hi, bounded := dialect.ScopeRange(prefix)
	b = b.Where(sq.GtOrEq{"scope": lo})
	if bounded {
		b = b.Where(sq.Lt{"scope": hi})
	}
	return b
}

// stateCondition is the condition that selects records in state s.
func stateCondition(s dialect.State) (sq.Sqlizer, error) {
	switch s {
	case dialect.Pending:
		return sq.Eq{"status": nil}, nil
	case dialect.Completed:
		return sq.NotEq{"status": nil}, nil
	}
	return nil, fmt.Errorf("mysql: %w: state %v", dialect.ErrInvalidConfig, s)
}

// Inspect reads the record of a key, live or expired.
func (d *mysqlDialect) Inspect(ctx context.Context, q dialect.Queryer, t dialect.Table, a dialect.LookupArgs) (dialect.RecordInfo, bool, error) {
	recs, err := infos(ctx, q, adminSelect(t, clock(a.Now)).Where(sq.Eq{"scope": a.Scope, "idem_key": a.Key}))
	if err != nil || len(recs) == 0 {
		return dialect.RecordInfo{}, false, err
	}
	return recs[0], true, nil
}

// List returns a page of records matching a's filters.
func (d *mysqlDialect) List(ctx context.Context, q dialect.Queryer, t dialect.Table, a dialect.ListArgs) ([]dialect.RecordInfo, error) {
	clk := clock(a.Now)
	b := scopePrefix(adminSelect(t, clk), a.ScopePrefix)
	if len(a.States) > 0 {
		var in sq.Or
		for _, s := range a.States {
			c, err := stateCondition(s)
			if err != nil {
				return nil, err
			}
			in = append(in, c)
		}
		b = b.Where(in)
	}
	if a.MinAge > 0 {
		b = b.Where(sq.Expr("created_at <= "+ago, clk, a.MinAge.Microseconds()))
	}
	if a.MaxAge > 0 {
		b = b.Where(sq.Expr("created_at >= "+ago, clk, a.MaxAge.Microseconds()))
	}
	switch a.Expiry {
	case dialect.LiveOnly:
		b = b.Where(sq.Expr("expires_at > "+now, clk))
	case dialect.ExpiredOnly:
		b = b.Where(sq.Expr(expiredAt, clk))
	}
	if a.AfterSet {
		b = b.Where(sq.Or{sq.Gt{"scope": a.AfterScope}, sq.And{sq.Eq{"scope": a.AfterScope}, sq.Gt{"idem_key": a.AfterKey}}})
	}
	return infos(ctx, q, b.OrderBy("scope", "idem_key").Limit(uint64(max(a.Limit, 0))))
}

func infos(ctx context.Context, q dialect.Queryer, b sq.SelectBuilder) ([]dialect.RecordInfo, error) {
	stmt, args, err := b.ToSql()
	if err != nil {
		return nil, fmt.Errorf("mysql: build listing: %w", err)
	}
	rows, err := query(ctx, q, stmt, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []dialect.RecordInfo
	for rows.Next() {
		var (
			r                        dialect.RecordInfo
			scope, key               []byte
			status                   *int64
			created, expires, nowVal int64
			lease                    *int64
			step                     []byte
		)
		if err := rows.Scan(&scope, &key, &r.Fingerprint, &status, &r.HeaderBytes, &r.BodyBytes, &created, &expires,
			&r.Token, &lease, &step, &nowVal); err != nil {
			return nil, err
		}
		if lease != nil {
			r.LeaseUntil = time.UnixMicro(*lease).UTC()
		}
		r.Step = string(step)
		r.Scope, r.Key = string(scope), string(key)
		r.State = dialect.Pending
		if status != nil {
			r.State, r.Status = dialect.Completed, int(*status)
		}
		r.CreatedAt, r.ExpiresAt, r.Now = time.UnixMicro(created).UTC(), time.UnixMicro(expires).UTC(), time.UnixMicro(nowVal).UTC()
		out = append(out, r)
	}
	return out, dialect.CloseRows(rows)
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
	key := sq.Eq{"scope": a.Scope, "idem_key": a.Key}
	b := adminSQL.Select("token").From(quoted(t)).Where(key)
	if !a.Force {
		b = b.Where(sq.Or{sq.NotEq{"status": nil}, sq.Expr(expiredAt, clock(a.Now))})
	}
	stmt, args, err := b.Suffix("FOR UPDATE").ToSql()
	if err != nil {
		return 0, fmt.Errorf("mysql: build delete: %w", err)
	}
	rows, err := query(ctx, q, stmt, args...)
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
	stmt, args, err = adminSQL.Delete(quoted(t)).Where(key).ToSql()
	if err != nil {
		return 0, fmt.Errorf("mysql: build delete: %w", err)
	}
	n, err := exec(ctx, q, stmt, args...)
	if err != nil {
		return 0, err
	}
	return n, d.raiseFloor(ctx, q, d.stmts.For(t), token)
}

// Count counts records by state and expiry.
func (d *mysqlDialect) Count(ctx context.Context, q dialect.Queryer, t dialect.Table, a dialect.CountArgs) ([]dialect.StateCount, error) {
	b := scopePrefix(adminSQL.Select("CASE WHEN status IS NULL THEN 1 ELSE 0 END AS pending").
		Column(sq.Expr("CASE WHEN "+expiredAt+" THEN 1 ELSE 0 END AS expired", clock(a.Now))).
		Column("COUNT(*)").
		From(quoted(t)).
		GroupBy("pending", "expired"), a.ScopePrefix)
	stmt, args, err := b.ToSql()
	if err != nil {
		return nil, fmt.Errorf("mysql: build count: %w", err)
	}
	rows, err := query(ctx, q, stmt, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []dialect.StateCount
	for rows.Next() {
		var pending, expired, n int64
		if err := rows.Scan(&pending, &expired, &n); err != nil {
			return nil, err
		}
		s := dialect.Completed
		if pending == 1 {
			s = dialect.Pending
		}
		out = append(out, dialect.StateCount{State: s, Expired: expired == 1, Count: n})
	}
	return out, dialect.CloseRows(rows)
}
