package main

import (
	"context"

	"github.com/idemkit/idem/dialect"
	"github.com/idemkit/idem/sqlite"
)

// sqliteLock decides the winner under the write lock every transaction of
// the driver already holds (BEGIN IMMEDIATE): it reads the key's live
// record, and when there is none the claim won, writing nothing; the
// completion then writes the record once, complete (an upsert that also
// takes over an expired record). With one writer at a time nobody can
// write the key between the read and the completion, so the read decides;
// the upsert still writes nothing over a live record (ErrNotClaimed), for a
// transaction begun without the write lock.
type sqliteLock struct {
	*sqlite.Dialect
	stmts *dialect.Statements[string]
}

// newSQLiteLock wraps base (the driver's dialect; nil: a new one).
func newSQLiteLock(base *sqlite.Dialect) *sqliteLock {
	if base == nil {
		base = sqlite.NewDialect()
	}
	return &sqliteLock{Dialect: base, stmts: dialect.NewStatements(func(t dialect.Table) *string {
		n := `"` + t.Name() + `"`
		const now = `COALESCE(?7, CAST(unixepoch('subsec') * 1000000 AS INTEGER))`
		s := `INSERT INTO ` + n + ` AS r (scope, idem_key, fingerprint, status, header, body, created_at, expires_at)
VALUES (?4, ?5, ?6, ?1, ?2, ?3, ` + now + `, ` + now + ` + ?8)
ON CONFLICT (scope, idem_key) DO UPDATE SET fingerprint = excluded.fingerprint, status = excluded.status,
	header = excluded.header, body = excluded.body, created_at = excluded.created_at, expires_at = excluded.expires_at,
	token = r.token + 1, lease_until = NULL, step = NULL, step_data = NULL
WHERE r.expires_at <= excluded.created_at`
		return &s
	})}
}

// Claim reads the live record under the write lock (in a caller's
// transaction: claims the library's way).
func (d *sqliteLock) Claim(ctx context.Context, q dialect.Queryer, t dialect.Table, a dialect.ClaimArgs) (dialect.ClaimResult, error) {
	if !ownedByCore(q) {
		return d.Dialect.Claim(ctx, q, t, a)
	}
	rec, found, err := d.Lookup(ctx, q, t, dialect.LookupArgs{Scope: a.Scope, Key: a.Key, Now: a.Now})
	if err != nil {
		return dialect.ClaimResult{}, err
	}
	if found {
		return dialect.ClaimResult{Record: rec}, nil
	}
	return dialect.ClaimResult{Won: true}, nil
}

// Complete writes the completed record.
func (d *sqliteLock) Complete(ctx context.Context, q dialect.Queryer, t dialect.Table, a dialect.CompleteArgs) error {
	if !ownedByCore(q) {
		return d.Dialect.Complete(ctx, q, t, a)
	}
	var now any
	if !a.Now.IsZero() {
		now = a.Now.UnixMicro()
	}
	n, err := dialect.ExecPrepared(ctx, q, *d.stmts.For(t),
		a.Status, a.Header, a.Body, a.Scope, a.Key, a.Fingerprint, now, a.Retention.Microseconds())
	if err != nil {
		return err
	}
	if n != 1 {
		return dialect.ErrNotClaimed
	}
	return nil
}
