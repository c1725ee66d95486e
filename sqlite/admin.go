package sqlite

import (
	"context"

	"github.com/idemkit/idem/dialect"
)

// The operator's statements (dialect.Admin), built by dialect.AdminSQL
// with SQLite's ? placeholders; times are Unix microseconds like
// everywhere in this backend.

var _ dialect.Admin = (*sqliteDialect)(nil)

// adminNow is queries/_parts.sql's "now" with squirrel's ? placeholder.
var adminNow = dialect.MustCompilePart(queries, "queries", `{{template "now"}}`, dialect.Question)

var adminSQL = dialect.AdminSQL{
	Name:         "sqlite",
	Placeholders: dialect.Question,
	Quote:        func(name string) string { return `"` + name + `"` },
	Now:          adminNow,
	Ago:          adminNow + ` - ?`,
	// length counts a TEXT value's characters; a BLOB's are its bytes.
	Length: func(col string) string { return `length(CAST(` + col + ` AS BLOB))` },
	Micros: func(col string) string { return col },
}

// Inspect reads the record of a key, live or expired.
func (d *sqliteDialect) Inspect(ctx context.Context, q dialect.Queryer, t dialect.Table, a dialect.LookupArgs) (dialect.RecordInfo, bool, error) {
	return adminSQL.Inspect(ctx, q, t, a)
}

// List returns a page of records matching a's filters.
func (d *sqliteDialect) List(ctx context.Context, q dialect.Queryer, t dialect.Table, a dialect.ListArgs) ([]dialect.RecordInfo, error) {
	return adminSQL.List(ctx, q, t, a)
}

// Count counts records by state and expiry.
func (d *sqliteDialect) Count(ctx context.Context, q dialect.Queryer, t dialect.Table, a dialect.CountArgs) ([]dialect.StateCount, error) {
	return adminSQL.Count(ctx, q, t, a)
}

// Delete deletes one record; unless forced, not a live pending one. It
// raises the token floor to the record's token.
func (d *sqliteDialect) Delete(ctx context.Context, q dialect.Queryer, t dialect.Table, a dialect.DeleteArgs) (int64, error) {
	del, args, err := adminSQL.DeleteSQL(t, a, "RETURNING token")
	if err != nil {
		return 0, err
	}
	rows, err := q.Query(ctx, del, args...)
	if err != nil {
		return 0, err
	}
	return d.raiseFloor(ctx, q, t, rows)
}
