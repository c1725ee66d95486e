package sqlite

import (
	"context"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"

	"github.com/idemkit/idem/dialect"
)

var _ dialect.BatchClaimer = (*sqliteDialect)(nil)

// ClaimBatch claims every key of a batch with one upsert (queries/
// claim_batch.sql) whose RETURNING names the keys it wrote, then reads the
// records of the others with one SELECT. The keys travel as one JSON
// parameter, so the statement's text is the same for every batch size
// and stays prepared. The transaction holds SQLite's write lock (BEGIN
// IMMEDIATE), so nothing waits inside either statement and nothing
// changes between them.
func (d *sqliteDialect) ClaimBatch(ctx context.Context, q dialect.Queryer, t dialect.Table, a dialect.BatchClaimArgs) ([]dialect.ClaimResult, error) {
	s := d.stmts.For(t)
	now := clock(a.Now)
	items := make([][3]string, len(a.Keys))
	for i, k := range a.Keys {
		items[i] = [3]string{k.Scope, k.Key, hex.EncodeToString(k.Fingerprint)}
	}
	keys, err := json.Marshal(items)
	if err != nil {
		return nil, err
	}
	rows, err := query(ctx, q, s.claimBatch, sql.Named("keys", string(keys)), sql.Named("now", now),
		sql.Named("retention_us", a.Retention.Microseconds()))
	if err != nil {
		return nil, err
	}
	won := make(map[[2]string]bool, len(a.Keys))
	for rows.Next() {
		var k [2]string
		if err := rows.Scan(&k[0], &k[1]); err != nil {
			rows.Close()
			return nil, err
		}
		won[k] = true
	}
	if err := dialect.CloseRows(rows); err != nil {
		return nil, err
	}
	res := make([]dialect.ClaimResult, len(a.Keys))
	var lost [][2]string
	for i, k := range a.Keys {
		if won[[2]string{k.Scope, k.Key}] {
			res[i].Won = true
		} else {
			lost = append(lost, [2]string{k.Scope, k.Key})
		}
	}
	if len(lost) == 0 {
		return res, nil
	}
	lostKeys, err := json.Marshal(lost)
	if err != nil {
		return nil, err
	}
	rows, err = query(ctx, q, s.readBatch, sql.Named("lost", string(lostKeys)), sql.Named("now", now))
	if err != nil {
		return nil, err
	}
	records := make(map[[2]string]dialect.Record, len(lost))
	for rows.Next() {
		rec, err := scanRecord(rows)
		if err != nil {
			rows.Close()
			return nil, err
		}
		records[[2]string{rec.Scope, rec.Key}] = rec
	}
	if err := dialect.CloseRows(rows); err != nil {
		return nil, err
	}
	for i, k := range a.Keys {
		if res[i].Won {
			continue
		}
		rec, found := records[[2]string{k.Scope, k.Key}]
		if !found {
			// As in Claim: the write lock rules this out; report it as
			// retryable rather than guess.
			return nil, dialect.Classified(dialect.ErrSerialization, errors.New("sqlite: claimed key has no live record"))
		}
		res[i].Record = rec
	}
	return res, nil
}
