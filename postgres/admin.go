package postgres

import (
	"context"
	"fmt"
	"time"

	sq "github.com/Masterminds/squirrel"

	"github.com/idemkit/idem/dialect"
)

// The operator's statements (dialect.Admin). Their filters vary from call
// to call, so they are built per call with squirrel, with PostgreSQL's $n
// placeholders. Scope comparisons use the column's "C" collation, so a
// prefix filter is a range the primary key serves.

var _ dialect.Admin = (*postgresDialect)(nil)

var adminSQL = sq.StatementBuilder.PlaceholderFormat(sq.Dollar)

// nowParam is the store's clock from a parameter, or the database's.
const nowParam = `COALESCE(?::timestamptz, statement_timestamp())`

// ago is nowParam minus a parameter in microseconds.
const ago = nowParam + ` - ?::bigint * interval '1 microsecond'`

func quoted(t dialect.Table) string { return `"` + t.Name() + `"` }

// adminSelect selects the columns infos reads.
func adminSelect(t dialect.Table, now any) sq.SelectBuilder {
	return adminSQL.Select("scope", "idem_key", "fingerprint", "status",
		"COALESCE(octet_length(header), 0)", "COALESCE(octet_length(body), 0)",
		"created_at", "expires_at", "token", "lease_until", "step").
		Column(sq.Expr(nowParam, now)).
		From(quoted(t))
}

// stateCondition is the condition that selects records in state s.
func stateCondition(s dialect.State) (sq.Sqlizer, error) {
	switch s {
	case dialect.Pending:
		return sq.Eq{"status": nil}, nil
	case dialect.Completed:
		return sq.NotEq{"status": nil}, nil
	}
	return nil, fmt.Errorf("postgres: %w: state %v", dialect.ErrInvalidConfig, s)
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

// Inspect reads the record of a key, live or expired.
func (d *postgresDialect) Inspect(ctx context.Context, q dialect.Queryer, t dialect.Table, a dialect.LookupArgs) (dialect.RecordInfo, bool, error) {
	recs, err := infos(ctx, q, adminSelect(t, clock(a.Now)).Where(sq.Eq{"scope": a.Scope, "idem_key": a.Key}))
	if err != nil || len(recs) == 0 {
		return dialect.RecordInfo{}, false, err
	}
	return recs[0], true, nil
}

// List returns a page of records matching a's filters.
func (d *postgresDialect) List(ctx context.Context, q dialect.Queryer, t dialect.Table, a dialect.ListArgs) ([]dialect.RecordInfo, error) {
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
		b = b.Where(sq.Expr("created_at <= "+ago, now, a.MinAge.Microseconds()))
	}
	if a.MaxAge > 0 {
		b = b.Where(sq.Expr("created_at >= "+ago, now, a.MaxAge.Microseconds()))
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
	return infos(ctx, q, b.OrderBy("scope", "idem_key").Limit(uint64(max(a.Limit, 0))))
}

func infos(ctx context.Context, q dialect.Queryer, b sq.SelectBuilder) ([]dialect.RecordInfo, error) {
	query, args, err := b.ToSql()
	if err != nil {
		return nil, fmt.Errorf("postgres: build listing: %w", err)
	}
	rows, err := q.Query(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []dialect.RecordInfo
	for rows.Next() {
		var (
			r      dialect.RecordInfo
			status *int64
			lease  *time.Time
			step   *string
		)
		if err := rows.Scan(&r.Scope, &r.Key, &r.Fingerprint, &status, &r.HeaderBytes, &r.BodyBytes, &r.CreatedAt, &r.ExpiresAt,
			&r.Token, &lease, &step, &r.Now); err != nil {
			return nil, err
		}
		if lease != nil {
			r.LeaseUntil = lease.UTC()
		}
		if step != nil {
			r.Step = *step
		}
		r.State = dialect.Pending
		if status != nil {
			r.State, r.Status = dialect.Completed, int(*status)
		}
		r.CreatedAt, r.ExpiresAt, r.Now = r.CreatedAt.UTC(), r.ExpiresAt.UTC(), r.Now.UTC()
		out = append(out, r)
	}
	return out, dialect.CloseRows(rows)
}

// Delete deletes one record; unless forced, not a live pending one, and
// raises the token floor to its token. A record whose claim is still open
// is invisible to the DELETE (not yet committed) or waits for it (a
// takeover or completion in progress), bounded by ctx.
func (d *postgresDialect) Delete(ctx context.Context, q dialect.Queryer, t dialect.Table, a dialect.DeleteArgs) (int64, error) {
	b := adminSQL.Delete(quoted(t)).Where(sq.Eq{"scope": a.Scope, "idem_key": a.Key})
	if !a.Force {
		b = b.Where(sq.Or{sq.NotEq{"status": nil}, sq.Expr("expires_at <= "+nowParam, clock(a.Now))})
	}
	query, args, err := b.Suffix("RETURNING token").ToSql()
	if err != nil {
		return 0, fmt.Errorf("postgres: build delete: %w", err)
	}
	return countRows(ctx, q, raisingFloor(query, d.stmts.For(t).fence), args...)
}

// Count counts records by state and expiry.
func (d *postgresDialect) Count(ctx context.Context, q dialect.Queryer, t dialect.Table, a dialect.CountArgs) ([]dialect.StateCount, error) {
	b := scopePrefix(adminSQL.Select("status IS NULL AS pending").
		Column(sq.Expr("expires_at <= "+nowParam+" AS expired", clock(a.Now))).
		Column("count(*)").
		From(quoted(t)).
		GroupBy("1", "2"), a.ScopePrefix)
	query, args, err := b.ToSql()
	if err != nil {
		return nil, fmt.Errorf("postgres: build count: %w", err)
	}
	rows, err := q.Query(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []dialect.StateCount
	for rows.Next() {
		var (
			pending, expired bool
			n                int64
		)
		if err := rows.Scan(&pending, &expired, &n); err != nil {
			return nil, err
		}
		s := dialect.Completed
		if pending {
			s = dialect.Pending
		}
		out = append(out, dialect.StateCount{State: s, Expired: expired, Count: n})
	}
	return out, dialect.CloseRows(rows)
}
