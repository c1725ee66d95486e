package mysql

import (
	"context"
	"database/sql"
	"errors"
	"strings"

	"github.com/idemkit/idem/dialect"
)

var (
	_ dialect.BatchClaimer   = (*mysqlDialect)(nil)
	_ dialect.BatchCompleter = (*mysqlDialect)(nil)
)

// keysMarker is where queries/peek_batch.sql and claim_batch.sql take the
// batch's derived table of keys.
const keysMarker = "/* keys */"

// ClaimBatch claims every key of a batch with two statements, whatever its
// size. InnoDB cannot say which rows of a multi-row insert it wrote, so
// the batch reads first: a locking read of the keys' records
// (queries/peek_batch.sql), which waits for the transactions holding them
// as Claim's peek does, then one INSERT of the keys that had none
// (queries/claim_batch.sql). A key another transaction inserted between the
// two fails the INSERT with a duplicate key, reported as ErrSerialization:
// the core retries the batch, whose read then finds it. An expired record
// is taken over with Claim's UPDATE (queries/takeover.sql), in key order.
// Every statement waits at most the wait bound, as in Claim.
func (d *mysqlDialect) ClaimBatch(ctx context.Context, q dialect.Queryer, t dialect.Table, a dialect.BatchClaimArgs) (res []dialect.ClaimResult, err error) {
	if d.vschema != nil {
		return dialect.ClaimBatch(ctx, keyByKey{d}, q, t, a)
	}
	if d.guarded && !inTransaction(q) {
		if err := checkCallerClaim(ctx, q); err != nil {
			return nil, err
		}
	}
	s := d.stmts.For(t)
	peek, insert, takeover := s.peekBatch, s.claimBatch, s.claim.takeover
	if d.perStatementWait {
		bound, _ := d.waitBound(a.WaitBound, true)
		peek, insert, takeover = bound(peek), bound(insert), d.bounded(t, s, a.WaitBound).takeover
	} else {
		var restore func() error
		restore, err = d.sessionWait(ctx, q, s, lockWaitSeconds(a.WaitBound))
		if err != nil {
			return nil, err
		}
		defer func() {
			if rerr := restore(); rerr != nil && err == nil {
				err = rerr
			}
		}()
	}
	now := sql.Named("now", clock(a.Now))

	keys := make([]any, 0, 2*len(a.Keys))
	for _, k := range a.Keys {
		keys = append(keys, k.Scope, k.Key)
	}
	args, err := peek.Args(now)
	if err != nil {
		return nil, err
	}
	rows, err := query(ctx, q, withKeys(peek.SQL, len(a.Keys), "batch_scope", "batch_key"), append(args, keys...)...)
	if err != nil {
		return nil, err
	}
	type found struct {
		rec     dialect.Record
		expired bool
	}
	records := make(map[[2]string]found, len(a.Keys))
	for rows.Next() {
		rec, expired, err := scanRecord(rows)
		if err != nil {
			rows.Close()
			return nil, err
		}
		records[[2]string{rec.Scope, rec.Key}] = found{rec, expired}
	}
	if err := dialect.CloseRows(rows); err != nil {
		return nil, err
	}

	res = make([]dialect.ClaimResult, len(a.Keys))
	var (
		missing []any // scope, key, fingerprint of each key without a record
		expired []int
	)
	for i, k := range a.Keys {
		f, ok := records[[2]string{k.Scope, k.Key}]
		switch {
		case !ok:
			missing = append(missing, k.Scope, k.Key, k.Fingerprint)
			res[i].Won = true
		case f.expired:
			expired = append(expired, i)
		default:
			res[i].Record = f.rec
		}
	}
	if len(missing) > 0 {
		args, err := insert.Args(now, sql.Named("retention_us", a.Retention.Microseconds()))
		if err != nil {
			return nil, err
		}
		n, err := exec(ctx, q, withKeys(insert.SQL, len(missing)/3, "batch_scope", "batch_key", "batch_fingerprint"), append(args, missing...)...)
		if isNumber(err, erDupEntry) {
			return nil, dialect.Classified(dialect.ErrSerialization, errors.New("mysql: a key of the batch was claimed between its read and its insert"))
		}
		if err != nil {
			return nil, err
		}
		if n != int64(len(missing)/3) {
			return nil, dialect.Classified(dialect.ErrSerialization, errors.New("mysql: the batch's insert wrote fewer records than it had keys"))
		}
	}
	for _, i := range expired {
		k := a.Keys[i]
		n, err := execNamed(ctx, q, takeover, sql.Named("scope", k.Scope), sql.Named("key", k.Key), sql.Named("fingerprint", k.Fingerprint),
			now, sql.Named("retention_us", a.Retention.Microseconds()))
		if err != nil {
			return nil, err
		}
		if n != 1 {
			return nil, dialect.Classified(dialect.ErrSerialization, errors.New("mysql: expired record changed during takeover"))
		}
		res[i].Won = true
	}
	return res, nil
}

// withKeys writes into stmt, in place of keysMarker, a derived table of n
// rows of placeholders, one column per name (batch_scope, batch_key, ...).
// Their arguments are in the order of the statement's text.
func withKeys(stmt string, n int, columns ...string) string {
	var b strings.Builder
	b.WriteString("(SELECT ")
	for i, c := range columns {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("? AS " + c)
	}
	row := strings.TrimSuffix(strings.Repeat("?, ", len(columns)), ", ")
	for range n - 1 {
		b.WriteString(" UNION ALL SELECT " + row)
	}
	b.WriteString(")")
	return strings.Replace(stmt, keysMarker, b.String(), 1)
}

// batchCompleteLimit bounds the response bytes one batch completion sends
// in one statement; a batch with more completes key by key.
const batchCompleteLimit = 1 << 20

// CompleteBatch stores the responses of a batch with one UPDATE joined to
// a derived table of the keys and their responses
// (queries/complete_batch.sql). A batch whose responses are large (over
// 1 MiB together, or beyond the server's packet) completes key by key.
func (d *mysqlDialect) CompleteBatch(ctx context.Context, q dialect.Queryer, t dialect.Table, a []dialect.CompleteArgs) error {
	if d.vschema != nil {
		return dialect.CompleteBatch(ctx, keyByKey{d}, q, t, a)
	}
	size := 0
	for _, c := range a {
		size += len(c.Header) + len(c.Body)
	}
	if size > batchCompleteLimit || d.maxPacket > 0 && int64(size+len(a)*packetOverhead) > d.maxPacket {
		for _, c := range a {
			if err := d.Complete(ctx, q, t, c); err != nil {
				return err
			}
		}
		return nil
	}
	s := d.stmts.For(t)
	args := make([]any, 0, 6*len(a)+2)
	for _, c := range a {
		args = append(args, c.Scope, c.Key, c.Fingerprint, int64(c.Status), c.Header, c.Body)
	}
	named, err := s.completeBatch.Args(sql.Named("now", clock(a[0].Now)), sql.Named("retention_us", a[0].Retention.Microseconds()))
	if err != nil {
		return err
	}
	stmt := withKeys(s.completeBatch.SQL, len(a), "batch_scope", "batch_key", "batch_fingerprint", "batch_status", "batch_header", "batch_body")
	n, err := exec(ctx, q, stmt, append(args, named...)...)
	if err != nil {
		return err
	}
	if n != int64(len(a)) {
		return dialect.ErrNotClaimed
	}
	return nil
}

// keyByKey is the dialect without its batch statements, whose derived table
// of keys vtgate cannot route to one shard: dialect.ClaimBatch and
// CompleteBatch then claim and complete key by key, each statement routed
// to its key's shard (vitess.go).
type keyByKey struct{ dialect.Dialect }
