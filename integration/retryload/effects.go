package retryload

import (
	"context"
	"database/sql"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// EffectsSQL is a Load.Effects that reads table's (k, nonce) rows on db.
func EffectsSQL(db *sql.DB, table string) func(ctx context.Context) (map[string][]string, error) {
	return func(ctx context.Context) (map[string][]string, error) {
		rows, err := db.QueryContext(ctx, "SELECT k, nonce FROM "+table) //nolint:gosec // the suite names its own table
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		m := map[string][]string{}
		for rows.Next() {
			var k, n string
			if err := rows.Scan(&k, &n); err != nil {
				return nil, err
			}
			m[k] = append(m[k], n)
		}
		return m, rows.Err()
	}
}

// EffectsPgx is a Load.Effects that reads table's (k, nonce) rows on p.
func EffectsPgx(p *pgxpool.Pool, table string) func(ctx context.Context) (map[string][]string, error) {
	return func(ctx context.Context) (map[string][]string, error) {
		rows, err := p.Query(ctx, "SELECT k, nonce FROM "+table)
		if err != nil {
			return nil, err
		}
		m := map[string][]string{}
		var k, n string
		_, err = pgx.ForEachRow(rows, []any{&k, &n}, func() error {
			m[k] = append(m[k], n)
			return nil
		})
		return m, err
	}
}
