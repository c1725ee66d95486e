package sqlite

import (
	"context"
	"fmt"
	"time"

	sq "github.com/Masterminds/squirrel"

	"github.com/idemkit/idem/dialect"
)

// The operator's statements (dialect.Admin). Their filters vary from call
// to call, so they are built per call with squirrel, with SQLite's ?
// placeholders; times are Unix microseconds like everywhere in this
// backend.

var _ dialect.Admin = (*sqliteDialect)(nil)

var adminSQL = sq.StatementBuilder.PlaceholderFormat(sq.Question)

// adminSelect selects the columns scanInfo reads; now is the store's clock
// (nil: the database's).
func adminSelect(t dialect.Table, now any) sq.SelectBuilder {
	return adminSQL.Select("scope", "idem_key", "fingerprint", "status",
		"COALESCE(length(CAST(header AS BLOB)), 0)", "COALESCE(length(CAST(body AS BLOB)), 0)",
		"created_at", "expires_at", "token", "lease_until", "step").
		Column(sq.Expr(nowParam, now)).
		From(`"` + t.Name() + `"`)
}

// nowParam is the store's clock from a parameter, or the database's.
var nowParam = now("?")

// scopePrefix narrows b to scopes with the prefix, as a range the primary
// key serves.
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
	return nil, fmt.Errorf("sqlite: %w: state %v", dialect.ErrInvalidConfig, s)
}

// Inspect reads the record of a key, live or expired.
func (d *sqliteDialect) Inspect(ctx context.Context, q dialect.Queryer, t dialect.Table, a dialect.LookupArgs) (dialect.RecordInfo, bool, error) {
	recs, err := d.infos(ctx, q, adminSelect(t, clock(a.Now)).Where(sq.Eq{"scope": a.Scope, "idem_key": a.Key}))
	if err != nil || len(recs) == 0 {
		return dialect.RecordInfo{}, false, err
	}
	return recs[0], true, nil
}

// List returns a page of records matching a's filters.
func (d *sqliteDialect) List(ctx context.Context, q dialect.Queryer, t dialect.Table, a dialect.ListArgs) ([]dialect.RecordInfo, error) {
	now := clock(a.Now)
	b := scopePrefix(adminSelect(t, now), a.ScopePrefix)
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
		b = b.Where(sq.Expr("created_at <= "+nowParam+" - ?", now, a.MinAge.Microseconds()))
	}
	if a.MaxAge > 0 {
		b = b.Where(sq.Expr("created_at >= "+nowParam+" - ?", now, a.MaxAge.Microseconds()))
	}
	switch a.Expiry {
	case dialect.LiveOnly:
		b = b.Where(sq.Expr("expires_at > "+nowParam, now))
	case dialect.ExpiredOnly:
		b = b.Where(sq.Expr("expires_at <= "+nowParam, now))
	}
	if a.AfterSet {
		b = b.Where(sq.Or{sq.Gt{"scope": a.AfterScope}, sq.And{sq.Eq{"scope": a.AfterScope}, sq.Gt{"idem_key": a.AfterKey}}})
	}
	return d.infos(ctx, q, b.OrderBy("scope", "idem_key").Limit(uint64(max(a.Limit, 0))))
}

func (d *sqliteDialect) infos(ctx context.Context, q dialect.Queryer, b sq.SelectBuilder) ([]dialect.RecordInfo, error) {
	query, args, err := b.ToSql()
	if err != nil {
		return nil, fmt.Errorf("sqlite: build listing: %w", err)
	}
	rows, err := q.Query(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []dialect.RecordInfo
	for rows.Next() {
		var (
			r                     dialect.RecordInfo
			status, lease         *int64
			created, expires, now int64
			step                  *string
		)
		if err := rows.Scan(&r.Scope, &r.Key, &r.Fingerprint, &status, &r.HeaderBytes, &r.BodyBytes, &created, &expires,
			&r.Token, &lease, &step, &now); err != nil {
			return nil, err
		}
		if lease != nil {
			r.LeaseUntil = time.UnixMicro(*lease).UTC()
		}
		if step != nil {
			r.Step = *step
		}
		r.State = dialect.Pending
		if status != nil {
			r.State, r.Status = dialect.Completed, int(*status)
		}
		r.CreatedAt, r.ExpiresAt, r.Now = time.UnixMicro(created).UTC(), time.UnixMicro(expires).UTC(), time.UnixMicro(now).UTC()
		out = append(out, r)
	}
	return out, dialect.CloseRows(rows)
}

// Delete deletes one record; unless forced, not a live pending one. It
// raises the token floor to the record's token.
func (d *sqliteDialect) Delete(ctx context.Context, q dialect.Queryer, t dialect.Table, a dialect.DeleteArgs) (int64, error) {
	b := adminSQL.Delete(`"` + t.Name() + `"`).Where(sq.Eq{"scope": a.Scope, "idem_key": a.Key})
	if !a.Force {
		b = b.Where(sq.Or{sq.NotEq{"status": nil}, sq.Expr("expires_at <= "+nowParam, clock(a.Now))})
	}
	query, args, err := b.Suffix("RETURNING token").ToSql()
	if err != nil {
		return 0, fmt.Errorf("sqlite: build delete: %w", err)
	}
	rows, err := q.Query(ctx, query, args...)
	if err != nil {
		return 0, err
	}
	return d.raiseFloor(ctx, q, t, rows)
}

// Count counts records by state and expiry.
func (d *sqliteDialect) Count(ctx context.Context, q dialect.Queryer, t dialect.Table, a dialect.CountArgs) ([]dialect.StateCount, error) {
	b := adminSQL.Select("CASE WHEN status IS NULL THEN 1 ELSE 0 END AS pending").
		Column(sq.Expr("CASE WHEN expires_at <= "+nowParam+" THEN 1 ELSE 0 END AS expired", clock(a.Now))).
		Column("COUNT(*)").
		From(`"`+t.Name()+`"`).
		GroupBy("pending", "expired")
	b = scopePrefix(b, a.ScopePrefix)
	query, args, err := b.ToSql()
	if err != nil {
		return nil, fmt.Errorf("sqlite: build count: %w", err)
	}
	rows, err := q.Query(ctx, query, args...)
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
