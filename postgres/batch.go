package postgres

import (
	"context"
	"database/sql"
	"errors"

	"github.com/idemkit/idem/dialect"
)

var (
	_ dialect.BatchClaimer   = (*postgresDialect)(nil)
	_ dialect.BatchCompleter = (*postgresDialect)(nil)
)

// ClaimBatch claims every key of a batch with one INSERT ... SELECT FROM
// unnest(...) ON CONFLICT DO NOTHING (queries/claim_batch.sql) whose
// RETURNING names the keys it inserted, and reads the records of all the
// keys with one SELECT that also restores the caller's lock_timeout
// (queries/peek_batch.sql): one round trip where the transaction
// pipelines. Like Claim, the insert waits for transactions holding its keys
// within the bound, and a key whose record expired is taken over with the
// guarded UPDATE of Claim (queries/takeover.sql), in key order.
func (d *postgresDialect) ClaimBatch(ctx context.Context, q dialect.Queryer, t dialect.Table, a dialect.BatchClaimArgs) ([]dialect.ClaimResult, error) {
	s := d.stmts.For(t)
	scopes, keys, fps := make([]string, len(a.Keys)), make([]string, len(a.Keys)), make([][]byte, len(a.Keys))
	for i, k := range a.Keys {
		scopes[i], keys[i], fps[i] = k.Scope, k.Key, k.Fingerprint
	}
	now := sql.Named("now", clock(a.Now))
	wait := sql.Named("wait", lockTimeout(a.WaitBound))
	retention := sql.Named("retention_us", a.Retention.Microseconds())
	claim, err := bind(s.claimBatch, sql.Named("scopes", scopes), sql.Named("keys", keys), sql.Named("fingerprints", fps), now, retention, wait)
	if err != nil {
		return nil, err
	}
	won := make(map[[2]string]bool, len(a.Keys))
	claim.Rows = func(r dialect.Rows) error {
		for r.Next() {
			var k [2]string
			if err := r.Scan(&k[0], &k[1]); err != nil {
				return err
			}
			won[k] = true
		}
		return r.Err()
	}
	peek, err := bind(s.peekBatch, sql.Named("scopes", scopes), sql.Named("keys", keys), now)
	if err != nil {
		return nil, err
	}
	type found struct {
		rec     dialect.Record
		expired bool
	}
	records := make(map[[2]string]found, len(a.Keys))
	peek.Rows = func(r dialect.Rows) error {
		for r.Next() {
			rec, expired, ok, err := scanColumns(r)
			if err != nil {
				return err
			}
			if ok {
				records[[2]string{rec.Scope, rec.Key}] = found{rec, expired}
			}
		}
		return r.Err()
	}
	if err := dialect.Pipeline(ctx, q, claim, peek); err != nil {
		return nil, err
	}

	res := make([]dialect.ClaimResult, len(a.Keys))
	var expired []int
	for i, k := range a.Keys {
		key := [2]string{k.Scope, k.Key}
		if won[key] {
			res[i].Won = true
			continue
		}
		f, ok := records[key]
		switch {
		case !ok:
			return nil, dialect.Classified(dialect.ErrSerialization, errors.New("postgres: conflicting record vanished before it could be read"))
		case f.expired:
			expired = append(expired, i)
		default:
			res[i].Record = f.rec
		}
	}
	if len(expired) == 0 {
		return res, nil
	}
	// Take the expired records over, in key order, each guarded as in
	// Claim, with the wait bounded again for these statements only.
	set, err := bind(s.lockWaitSet, wait)
	if err != nil {
		return nil, err
	}
	stmts := []dialect.Statement{set}
	took := make([]bool, len(expired))
	for j, i := range expired {
		k := a.Keys[i]
		takeover, err := bind(s.takeover, sql.Named("scope", k.Scope), sql.Named("key", k.Key), sql.Named("fingerprint", k.Fingerprint), now, retention)
		if err != nil {
			return nil, err
		}
		takeover.Rows = func(r dialect.Rows) error { took[j] = r.Next(); return nil }
		stmts = append(stmts, takeover)
	}
	restore, err := bind(s.lockWaitRestore)
	if err != nil {
		return nil, err
	}
	if err := dialect.Pipeline(ctx, q, append(stmts, restore)...); err != nil {
		return nil, err
	}
	for j, i := range expired {
		if took[j] {
			res[i].Won = true
			continue
		}
		k := a.Keys[i]
		rec, gone, ok, err := d.read(ctx, q, s, k.Scope, k.Key, a.Now)
		if err != nil {
			return nil, err
		}
		if !ok || gone {
			return nil, dialect.Classified(dialect.ErrSerialization, errors.New("postgres: conflicting record vanished before it could be read"))
		}
		res[i].Record = rec
	}
	return res, nil
}

// CompleteBatch stores the responses of a batch with one UPDATE ... FROM
// unnest(...) (queries/complete_batch.sql). Like Complete, it is held back
// for COMMIT where the transaction can, guarded so that it fails unless it
// completed every key.
func (d *postgresDialect) CompleteBatch(ctx context.Context, q dialect.Queryer, t dialect.Table, a []dialect.CompleteArgs) error {
	s := d.stmts.For(t)
	n := len(a)
	scopes, keys, fps := make([]string, n), make([]string, n), make([][]byte, n)
	statuses, headers, bodies := make([]int, n), make([][]byte, n), make([][]byte, n)
	for i, c := range a {
		scopes[i], keys[i], fps[i] = c.Scope, c.Key, c.Fingerprint
		statuses[i], headers[i], bodies[i] = c.Status, c.Header, c.Body
	}
	named := []sql.NamedArg{
		sql.Named("scopes", scopes), sql.Named("keys", keys), sql.Named("fingerprints", fps),
		sql.Named("statuses", statuses), sql.Named("headers", headers), sql.Named("bodies", bodies),
		sql.Named("now", clock(a[0].Now)), sql.Named("retention_us", a[0].Retention.Microseconds()),
	}
	guarded, err := bind(s.completeBatchGuarded, append(named, sql.Named("count", int64(n)))...)
	if err != nil {
		return err
	}
	if dialect.DeferToCommit(q, guarded) {
		return nil
	}
	complete, err := bind(s.completeBatch, named...)
	if err != nil {
		return err
	}
	done, err := q.Exec(ctx, complete.SQL, complete.Args...)
	if err != nil {
		return err
	}
	if done != int64(n) {
		return dialect.ErrNotClaimed
	}
	return nil
}
