package dialect

import (
	"context"
	"fmt"
	"time"

	sq "github.com/Masterminds/squirrel"
)

// AdminSQL builds the operator's statements (Admin) for one database from
// the few things that differ between databases, so a backend describes
// its spelling once and the filters are written once for every backend.
// Their filters vary from call to call, so the statements are built per
// call with squirrel. Scope filters are ranges (ScopeRange) the primary key
// serves, compared byte by byte: the backend's scope column must order so.
//
// Inspect, List and Count are whole; a backend's Delete builds its
// statements with DeleteSQL and LockDeletableSQL and raises the token floor
// its own way.
type AdminSQL struct {
	// Name is the backend's name, the prefix of its errors ("postgres").
	Name string
	// Placeholders is how parameters are written in the statements sent:
	// Dollar or Question. The fields below write them as ?.
	Placeholders Placeholder
	// Quote is the table's name as a quoted identifier.
	Quote func(name string) string
	// Now is the clock the statements judge expiry and age by, with one ?:
	// the store's clock, or NULL for the database's (see Clock).
	Now string
	// Ago is Now minus an age, with two ?: Now's, then the age in
	// microseconds.
	Ago string
	// Length gives the size in bytes of a stored header or body column.
	Length func(col string) string
	// Micros, when set, says the database's times are Unix microseconds:
	// Micros(col) selects a time column (or Now) as an integer of them, and
	// Now's parameter is one. Unset, times are read as time.Time and Now's
	// parameter is a UTC time.Time.
	Micros func(col string) string
}

// Clock is Now's parameter for the store's clock t: nil (the database's
// clock) when t is zero.
func (s AdminSQL) Clock(t time.Time) any {
	switch {
	case t.IsZero():
		return nil
	case s.Micros != nil:
		return t.UnixMicro()
	}
	return t.UTC()
}

func (s AdminSQL) builder() sq.StatementBuilderType {
	if s.Placeholders == Dollar {
		return sq.StatementBuilder.PlaceholderFormat(sq.Dollar)
	}
	return sq.StatementBuilder.PlaceholderFormat(sq.Question)
}

// time selects a time column (or expression) as the scan reads it.
func (s AdminSQL) time(col string) string {
	if s.Micros != nil {
		return s.Micros(col)
	}
	return col
}

// key is the condition that selects one record.
func key(scope, key string) sq.Eq { return sq.Eq{"scope": scope, "idem_key": key} }

// selectInfos selects the columns infos reads.
func (s AdminSQL) selectInfos(t Table, clk any) sq.SelectBuilder {
	return s.builder().Select("scope", "idem_key", "fingerprint", "status",
		"COALESCE("+s.Length("header")+", 0)", "COALESCE("+s.Length("body")+", 0)",
		s.time("created_at"), s.time("expires_at"), "token", s.time("lease_until"), "step").
		Column(sq.Expr(s.time(s.Now), clk)).
		From(s.Quote(t.Name()))
}

// scopePrefix narrows b to scopes with the prefix, as a range.
func scopePrefix[B interface{ Where(any, ...any) B }](b B, prefix string) B {
	if prefix == "" {
		return b
	}
	lo, hi, bounded := ScopeRange(prefix)
	b = b.Where(sq.GtOrEq{"scope": lo})
	if bounded {
		b = b.Where(sq.Lt{"scope": hi})
	}
	return b
}

// stateCondition is the condition that selects records in state st.
func (s AdminSQL) stateCondition(st State) (sq.Sqlizer, error) {
	switch st {
	case Pending:
		return sq.Eq{"status": nil}, nil
	case Completed:
		return sq.NotEq{"status": nil}, nil
	}
	return nil, fmt.Errorf("%s: %w: state %v", s.Name, ErrInvalidConfig, st)
}

// Inspect is Admin.Inspect: it reads the record of a key, live or expired.
func (s AdminSQL) Inspect(ctx context.Context, q Queryer, t Table, a LookupArgs) (RecordInfo, bool, error) {
	recs, err := s.infos(ctx, q, s.selectInfos(t, s.Clock(a.Now)).Where(key(a.Scope, a.Key)))
	if err != nil || len(recs) == 0 {
		return RecordInfo{}, false, err
	}
	return recs[0], true, nil
}

// List is Admin.List: it returns a page of records matching a's filters.
func (s AdminSQL) List(ctx context.Context, q Queryer, t Table, a ListArgs) ([]RecordInfo, error) {
	clk := s.Clock(a.Now)
	b := scopePrefix(s.selectInfos(t, clk), a.ScopePrefix)
	if len(a.States) > 0 {
		var in sq.Or
		for _, st := range a.States {
			c, err := s.stateCondition(st)
			if err != nil {
				return nil, err
			}
			in = append(in, c)
		}
		b = b.Where(in)
	}
	if a.MinAge > 0 {
		b = b.Where(sq.Expr("created_at <= "+s.Ago, clk, a.MinAge.Microseconds()))
	}
	if a.MaxAge > 0 {
		b = b.Where(sq.Expr("created_at >= "+s.Ago, clk, a.MaxAge.Microseconds()))
	}
	switch a.Expiry {
	case LiveOnly:
		b = b.Where(sq.Expr("expires_at > "+s.Now, clk))
	case ExpiredOnly:
		b = b.Where(sq.Expr("expires_at <= "+s.Now, clk))
	}
	if a.AfterSet {
		b = b.Where(sq.Or{sq.Gt{"scope": a.AfterScope}, sq.And{sq.Eq{"scope": a.AfterScope}, sq.Gt{"idem_key": a.AfterKey}}})
	}
	return s.infos(ctx, q, b.OrderBy("scope", "idem_key").Limit(uint64(max(a.Limit, 0))))
}

// adminTime is a time column as the scan reads it: a time, or Unix
// microseconds (Micros); neither when NULL.
type adminTime struct {
	at     *time.Time
	micros *int64
}

// dest is where Scan puts the column.
func (s AdminSQL) dest(v *adminTime) any {
	if s.Micros != nil {
		return &v.micros
	}
	return &v.at
}

// utc is the time read, in UTC; the zero time for NULL.
func (v adminTime) utc() time.Time {
	switch {
	case v.micros != nil:
		return time.UnixMicro(*v.micros).UTC()
	case v.at != nil:
		return v.at.UTC()
	}
	return time.Time{}
}

// collect builds b, runs it on q and reads each row with scan; what
// names the statement in a build error.
func collect[T any](ctx context.Context, s AdminSQL, q Queryer, b sq.Sqlizer, what string, scan func(Rows) (T, error)) ([]T, error) {
	stmt, args, err := b.ToSql()
	if err != nil {
		return nil, fmt.Errorf("%s: build %s: %w", s.Name, what, err)
	}
	rows, err := q.Query(ctx, stmt, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, CloseRows(rows)
}

// infos runs the query b of selectInfos and reads its records.
func (s AdminSQL) infos(ctx context.Context, q Queryer, b sq.SelectBuilder) ([]RecordInfo, error) {
	return collect(ctx, s, q, b, "listing", func(rows Rows) (RecordInfo, error) {
		var (
			r                            RecordInfo
			status                       *int64
			created, expires, lease, now adminTime
			step                         *string
		)
		if err := rows.Scan(&r.Scope, &r.Key, &r.Fingerprint, &status, &r.HeaderBytes, &r.BodyBytes,
			s.dest(&created), s.dest(&expires), &r.Token, s.dest(&lease), &step, s.dest(&now)); err != nil {
			return r, err
		}
		if step != nil {
			r.Step = *step
		}
		r.State = Pending
		if status != nil {
			r.State, r.Status = Completed, int(*status)
		}
		r.CreatedAt, r.ExpiresAt, r.LeaseUntil, r.Now = created.utc(), expires.utc(), lease.utc(), now.utc()
		return r, nil
	})
}

// DeleteSQL is the statement that deletes the record of a.Scope and a.Key
// and, unless a.Force, only when it is completed or expired, with suffix
// appended ("RETURNING token", or ""): Admin.Delete's, but for the token
// floor, which the backend raises its own way.
func (s AdminSQL) DeleteSQL(t Table, a DeleteArgs, suffix string) (string, []any, error) {
	return deleting(s, s.builder().Delete(s.Quote(t.Name())), a, suffix)
}

// LockDeletableSQL is the query that reads the token of the record DeleteSQL
// would delete, with suffix appended (a locking clause such as "FOR
// UPDATE"): for a database whose DELETE returns no rows.
func (s AdminSQL) LockDeletableSQL(t Table, a DeleteArgs, suffix string) (string, []any, error) {
	return deleting(s, s.builder().Select("token").From(s.Quote(t.Name())), a, suffix)
}

// deleting narrows b to the record a names and, unless a.Force, to a
// record no claim may still be working on: completed, or expired.
func deleting[B interface {
	Where(any, ...any) B
	Suffix(string, ...any) B
	ToSql() (string, []any, error)
}](s AdminSQL, b B, a DeleteArgs, suffix string) (string, []any, error) {
	b = b.Where(key(a.Scope, a.Key))
	if !a.Force {
		b = b.Where(sq.Or{sq.NotEq{"status": nil}, sq.Expr("expires_at <= "+s.Now, s.Clock(a.Now))})
	}
	if suffix != "" {
		b = b.Suffix(suffix)
	}
	stmt, args, err := b.ToSql()
	if err != nil {
		return "", nil, fmt.Errorf("%s: build delete: %w", s.Name, err)
	}
	return stmt, args, nil
}

// Count is Admin.Count: it counts records by state and expiry.
func (s AdminSQL) Count(ctx context.Context, q Queryer, t Table, a CountArgs) ([]StateCount, error) {
	b := scopePrefix(s.builder().Select("CASE WHEN status IS NULL THEN 1 ELSE 0 END AS pending").
		Column(sq.Expr("CASE WHEN expires_at <= "+s.Now+" THEN 1 ELSE 0 END AS expired", s.Clock(a.Now))).
		Column("COUNT(*)").
		From(s.Quote(t.Name())).
		GroupBy("pending", "expired"), a.ScopePrefix)
	return collect(ctx, s, q, b, "count", func(rows Rows) (StateCount, error) {
		var pending, expired, n int64
		if err := rows.Scan(&pending, &expired, &n); err != nil {
			return StateCount{}, err
		}
		st := Completed
		if pending == 1 {
			st = Pending
		}
		return StateCount{State: st, Expired: expired == 1, Count: n}, nil
	})
}
