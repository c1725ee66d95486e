package postgres

import (
	"context"

	"github.com/idemkit/idem/dialect"
)

// The operator's statements (dialect.Admin), built by dialect.AdminSQL
// with PostgreSQL's $n placeholders and timestamptz times. Scope
// comparisons use the column's "C" collation, so a prefix filter is a range
// the primary key serves.

var _ dialect.Admin = (*postgresDialect)(nil)

// adminNow is queries/_parts.sql's "now" with squirrel's ? placeholder.
var adminNow = dialect.MustCompilePart(queriesFS, "queries", `{{template "now"}}`, dialect.Question)

var adminSQL = dialect.AdminSQL{
	Name:         "postgres",
	Placeholders: dialect.Dollar,
	Quote:        func(name string) string { return `"` + name + `"` },
	Now:          adminNow,
	Ago:          adminNow + ` - ?::bigint * interval '1 microsecond'`,
	Length:       func(col string) string { return `octet_length(` + col + `)` },
}

// Inspect reads the record of a key, live or expired.
func (d *postgresDialect) Inspect(ctx context.Context, q dialect.Queryer, t dialect.Table, a dialect.LookupArgs) (dialect.RecordInfo, bool, error) {
	return adminSQL.Inspect(ctx, q, t, a)
}

// List returns a page of records matching a's filters.
func (d *postgresDialect) List(ctx context.Context, q dialect.Queryer, t dialect.Table, a dialect.ListArgs) ([]dialect.RecordInfo, error) {
	return adminSQL.List(ctx, q, t, a)
}

// Count counts records by state and expiry.
func (d *postgresDialect) Count(ctx context.Context, q dialect.Queryer, t dialect.Table, a dialect.CountArgs) ([]dialect.StateCount, error) {
	return adminSQL.Count(ctx, q, t, a)
}

// Delete deletes one record; unless forced, not a live pending one, and
// raises the token floor to its token in the same statement. A record
// whose claim is still open is invisible to the DELETE (not yet committed)
// or waits for it (a takeover or completion in progress), bounded by ctx.
func (d *postgresDialect) Delete(ctx context.Context, q dialect.Queryer, t dialect.Table, a dialect.DeleteArgs) (int64, error) {
	del, args, err := adminSQL.DeleteSQL(t, a, "RETURNING token")
	if err != nil {
		return 0, err
	}
	return countRows(ctx, q, raisingFloor(del, d.stmts.For(t).fence), args...)
}
