package main

import (
	"context"
	"strconv"
	"time"

	"github.com/idemkit/idem/dialect"
	"github.com/idemkit/idem/postgres"
)

// Alternatives to the PostgreSQL dialect's claim, written here to be
// measured before any moves into package postgres. Each embeds the
// library's dialect and replaces what it changes; the rest (lookups, purge,
// lease mode, error classification) is the library's. The statements keep
// idem's schema and record format, so records written one way replay the
// other, and the conformance suite runs on each (alternatives_test.go).

// pgAltSQL are the alternatives' statements for one table.
type pgAltSQL struct {
	// claim and peek are the library's claim and its loser's read (which
	// restores lock_timeout).
	claim, peek string
	// claimRead is the claim with a read of the record it lost to, as the
	// statement's snapshot holds it, in one statement.
	claimRead string
	// lock takes a transaction-scoped advisory lock on the key, with
	// lock_timeout set to the wait bound ($3) and the caller's saved.
	lock string
	// restore puts the caller's lock_timeout back after lock.
	restore string
	// upsert writes the completed record: a new one, or over an expired
	// one (a takeover); it changes nothing when a live record is there.
	// guarded is the same, made to fail when it wrote nothing, so that a
	// pipeline sending COMMIT after it stops before the COMMIT.
	upsert, guarded string
}

func pgColumns(alias, now string) string {
	p := alias + "."
	return p + `scope, ` + p + `idem_key, ` + p + `fingerprint, ` + p + `status, ` + p + `header, ` + p + `body, ` +
		p + `created_at, ` + p + `expires_at, ` + p + `expires_at <= ` + now + `, ` +
		p + `token, ` + p + `lease_until, ` + p + `step, ` + p + `step_data, ` + p + `lease_until <= ` + now
}

func newPgAltSQL(t dialect.Table) *pgAltSQL {
	n := `"` + t.Name() + `"`
	const now = `COALESCE($4::timestamptz, statement_timestamp())`
	const readNow = `COALESCE($3::timestamptz, statement_timestamp())`
	const completeNow = `COALESCE($7::timestamptz, statement_timestamp())`
	upsert := `INSERT INTO ` + n + ` AS r (scope, idem_key, fingerprint, status, header, body, created_at, expires_at)
VALUES ($4, $5, $6, $1, $2, $3, ` + completeNow + `, ` + completeNow + ` + $8::bigint * interval '1 microsecond')
ON CONFLICT (scope, idem_key) DO UPDATE SET fingerprint = excluded.fingerprint, status = excluded.status,
	header = excluded.header, body = excluded.body, created_at = excluded.created_at, expires_at = excluded.expires_at,
	token = r.token + 1, lease_until = NULL, step = NULL, step_data = NULL
WHERE r.expires_at <= excluded.created_at`
	return &pgAltSQL{
		claim: `INSERT INTO ` + n + ` (scope, idem_key, fingerprint, created_at, expires_at)
SELECT $1::text, $2::text, $3::bytea, ` + now + `, ` + now + ` + $5::bigint * interval '1 microsecond'
FROM (SELECT set_config('lock_timeout', $6, true)
	FROM (SELECT set_config('idem.saved_lock_timeout', current_setting('lock_timeout'), true) OFFSET 0) saved
	OFFSET 0) bounded
ON CONFLICT (scope, idem_key) DO NOTHING
RETURNING set_config('lock_timeout', current_setting('idem.saved_lock_timeout'), true)`,
		peek: `SELECT ` + pgColumns("r", readNow) + `
FROM (SELECT set_config('lock_timeout', current_setting('idem.saved_lock_timeout'), true) OFFSET 0) restored
LEFT JOIN ` + n + ` r ON r.scope = $1 AND r.idem_key = $2`,
		// The claim as a data-modifying CTE. When it inserted, one row
		// (true, NULLs); when it lost to a record the statement's snapshot
		// sees (a settled key), that record, restoring lock_timeout; when it
		// lost to a record committed after the snapshot (a winner it waited
		// for), no row.
		claimRead: `WITH claimed AS (INSERT INTO ` + n + ` (scope, idem_key, fingerprint, created_at, expires_at)
SELECT $1::text, $2::text, $3::bytea, ` + now + `, ` + now + ` + $5::bigint * interval '1 microsecond'
FROM (SELECT set_config('lock_timeout', $6, true)
	FROM (SELECT set_config('idem.saved_lock_timeout', current_setting('lock_timeout'), true) OFFSET 0) saved
	OFFSET 0) bounded
ON CONFLICT (scope, idem_key) DO NOTHING
RETURNING set_config('lock_timeout', current_setting('idem.saved_lock_timeout'), true) AS restored)
SELECT true, NULL::text, NULL::text, NULL::bytea, NULL::smallint, NULL::bytea, NULL::bytea, NULL::timestamptz, NULL::timestamptz,
	NULL::boolean, NULL::bigint, NULL::timestamptz, NULL::text, NULL::bytea, NULL::boolean, restored FROM claimed
UNION ALL
SELECT false, ` + pgColumns("r", now) + `, set_config('lock_timeout', current_setting('idem.saved_lock_timeout'), true)
FROM ` + n + ` r WHERE r.scope = $1 AND r.idem_key = $2 AND NOT EXISTS (SELECT 1 FROM claimed)`,
		// The key's hash names the lock: the length of the scope keeps
		// ("ab", "c") and ("a", "bc") apart. Two keys that hash alike only
		// wait for each other; the record decides.
		lock: `SELECT pg_advisory_xact_lock(hashtextextended(length($1)::text || ':' || $1 || $2, 0))
FROM (SELECT set_config('lock_timeout', $3, true)
	FROM (SELECT set_config('idem.saved_lock_timeout', current_setting('lock_timeout'), true) OFFSET 0) saved
	OFFSET 0) bounded`,
		restore: `SELECT set_config('lock_timeout', current_setting('idem.saved_lock_timeout'), true)`,
		upsert:  upsert,
		guarded: `WITH done AS (` + upsert + ` RETURNING 1) SELECT 1 / count(*) FROM done`,
	}
}

// pgLockTimeout renders a wait bound for lock_timeout (at least 1 ms).
func pgLockTimeout(d time.Duration) string {
	return strconv.FormatInt(max(d.Milliseconds(), 1), 10) + "ms"
}

func pgClock(now time.Time) any {
	if now.IsZero() {
		return nil
	}
	return now.UTC()
}

// pgScan reads the columns of peek (pgColumns); a row of NULLs means no
// record.
func pgScan(r dialect.Rows) (rec dialect.Record, expired, found bool, err error) {
	if !r.Next() {
		return rec, false, false, nil
	}
	var (
		scope, key, step        *string
		status, token           *int64
		header, body, fp, data  []byte
		created, expires, lease *time.Time
		expiredFlag, leaseEnded *bool
	)
	if err := r.Scan(&scope, &key, &fp, &status, &header, &body, &created, &expires, &expiredFlag,
		&token, &lease, &step, &data, &leaseEnded); err != nil {
		return rec, false, false, err
	}
	if scope == nil || key == nil || created == nil || expires == nil || expiredFlag == nil || token == nil {
		return rec, false, false, nil
	}
	rec.Scope, rec.Key, rec.Fingerprint, rec.Header, rec.Body = *scope, *key, fp, header, body
	rec.State = dialect.Pending
	if status != nil {
		rec.State, rec.Status = dialect.Completed, int(*status)
	}
	rec.CreatedAt, rec.ExpiresAt, rec.Token, rec.StepData = created.UTC(), expires.UTC(), *token, data
	if lease != nil {
		rec.LeaseUntil, rec.LeaseExpired = lease.UTC(), leaseEnded != nil && *leaseEnded
	}
	if step != nil {
		rec.Step = *step
	}
	return rec, *expiredFlag, true, nil
}

// pgPeek is the PostgreSQL dialect with the loser's read sent in the
// claim's round trip: BEGIN, the claim and the read of the record go
// together, so a replay of a settled key costs that round trip and the
// ROLLBACK (2; the library's costs 3), and a first request pays one read of
// its own new row, in a round trip it sends anyway.
//
// The read is a statement of its own after the claim, so at READ COMMITTED
// it sees a winner the claim waited for (a new statement, a new snapshot).
// A record that expired or vanished goes the library's way (its claim
// conflicts again and writes nothing, then it takes over).
type pgPeek struct {
	*postgres.Dialect
	stmts *dialect.Statements[pgAltSQL]
}

func newPgPeek() *pgPeek {
	return &pgPeek{Dialect: postgres.NewDialect(), stmts: dialect.NewStatements(newPgAltSQL)}
}

// Claim sends the claim and the read together.
func (d *pgPeek) Claim(ctx context.Context, q dialect.Queryer, t dialect.Table, a dialect.ClaimArgs) (dialect.ClaimResult, error) {
	s := d.stmts.For(t)
	now := pgClock(a.Now)
	var (
		won, found, expired bool
		rec                 dialect.Record
	)
	err := dialect.Pipeline(ctx, q,
		dialect.Statement{
			SQL:  s.claim,
			Args: []any{a.Scope, a.Key, a.Fingerprint, now, a.Retention.Microseconds(), pgLockTimeout(a.WaitBound)},
			Rows: func(r dialect.Rows) error { won = r.Next(); return nil },
		},
		dialect.Statement{
			SQL:  s.peek,
			Args: []any{a.Scope, a.Key, now},
			Rows: func(r dialect.Rows) (err error) { rec, expired, found, err = pgScan(r); return err },
		})
	switch {
	case err != nil:
		return dialect.ClaimResult{}, err
	case won:
		return dialect.ClaimResult{Won: true}, nil
	case found && !expired:
		return dialect.ClaimResult{Record: rec}, nil
	}
	return d.Dialect.Claim(ctx, q, t, a)
}

// ownedByCore reports whether q is a transaction the core began (Store.Do,
// which always completes its claim or rolls back), not a caller's
// transaction (Store.Claim, which may commit a claim it never completes).
// The lock alternatives decide without writing only in the first: a
// caller's transaction gets the library's pending record, so that a claim
// committed without its completion stays in flight. In the library this
// would be a field of dialect.ClaimArgs and CompleteArgs set by Do; here a
// transaction of the core is told by its Commit method.
func ownedByCore(q dialect.Queryer) bool {
	_, ok := q.(interface{ Commit(context.Context) error })
	return ok
}

// pgClaimRead is the PostgreSQL dialect whose claim also returns the
// record it lost to when the statement's snapshot holds it: a replay of a
// settled key is answered by the claim itself, in the round trip of BEGIN
// (then ROLLBACK: 2 round trips, 3 statements), and a first request costs
// what the library's claim costs, in one statement. A record committed
// while the claim waited for it is not in the snapshot: the library's read
// follows, as today.
type pgClaimRead struct {
	*postgres.Dialect
	stmts *dialect.Statements[pgAltSQL]
}

func newPgClaimRead() *pgClaimRead {
	return &pgClaimRead{Dialect: postgres.NewDialect(), stmts: dialect.NewStatements(newPgAltSQL)}
}

// Claim claims and reads in one statement.
func (d *pgClaimRead) Claim(ctx context.Context, q dialect.Queryer, t dialect.Table, a dialect.ClaimArgs) (dialect.ClaimResult, error) {
	var (
		won, found, expired bool
		rec                 dialect.Record
	)
	err := dialect.Pipeline(ctx, q, dialect.Statement{
		SQL:  d.stmts.For(t).claimRead,
		Args: []any{a.Scope, a.Key, a.Fingerprint, pgClock(a.Now), a.Retention.Microseconds(), pgLockTimeout(a.WaitBound)},
		Rows: func(r dialect.Rows) (err error) {
			rec, expired, found, won, err = pgScanClaimRead(r)
			return err
		},
	})
	switch {
	case err != nil:
		return dialect.ClaimResult{}, err
	case won:
		return dialect.ClaimResult{Won: true}, nil
	case found && !expired:
		return dialect.ClaimResult{Record: rec}, nil
	}
	// Not in the snapshot, or expired: the library's way (its claim
	// conflicts again, writing nothing, then it reads and takes over).
	return d.Dialect.Claim(ctx, q, t, a)
}

// pgScanClaimRead reads claimRead's row: won, or the record.
func pgScanClaimRead(r dialect.Rows) (rec dialect.Record, expired, found, won bool, err error) {
	if !r.Next() {
		return rec, false, false, false, nil
	}
	var (
		isWon                   bool
		scope, key, step        *string
		status, token           *int64
		header, body, fp, data  []byte
		created, expires, lease *time.Time
		expiredFlag, leaseEnded *bool
		restored                *string
	)
	if err := r.Scan(&isWon, &scope, &key, &fp, &status, &header, &body, &created, &expires, &expiredFlag,
		&token, &lease, &step, &data, &leaseEnded, &restored); err != nil {
		return rec, false, false, false, err
	}
	if isWon {
		return rec, false, false, true, nil
	}
	if scope == nil || key == nil || created == nil || expires == nil || expiredFlag == nil || token == nil {
		return rec, false, false, false, nil
	}
	rec.Scope, rec.Key, rec.Fingerprint, rec.Header, rec.Body = *scope, *key, fp, header, body
	rec.State = dialect.Pending
	if status != nil {
		rec.State, rec.Status = dialect.Completed, int(*status)
	}
	rec.CreatedAt, rec.ExpiresAt, rec.Token, rec.StepData = created.UTC(), expires.UTC(), *token, data
	if lease != nil {
		rec.LeaseUntil, rec.LeaseExpired = lease.UTC(), leaseEnded != nil && *leaseEnded
	}
	if step != nil {
		rec.Step = *step
	}
	return rec, *expiredFlag, true, false, nil
}

// pgLock decides the winner under a transaction-scoped advisory lock on
// the key, without writing: the lock (lock_timeout bounds the wait) and a
// read of the record go with BEGIN in one round trip. No live record: the
// claim won, and the completion writes the record once, complete, in the
// round trip of COMMIT (an upsert that also takes over an expired record).
// A live record: the claim lost to it.
//
// One winner: every claimer of a key takes the same lock, which the holder
// keeps until its transaction ends; the read is a statement after the
// lock's, so at READ COMMITTED it sees what the holder committed. The
// upsert is the last word: it writes nothing over a live record, and the
// completion fails then (at REPEATABLE READ a record committed after the
// snapshot raises 40001 there, and Do retries), so a writer that does not
// take the lock cannot make two effects commit. Lease claims take the lock
// too.
type pgLock struct {
	*postgres.Dialect
	stmts *dialect.Statements[pgAltSQL]
}

func newPgLock() *pgLock {
	return &pgLock{Dialect: postgres.NewDialect(), stmts: dialect.NewStatements(newPgAltSQL)}
}

// Claim locks the key and reads its record. In a caller's transaction it
// locks the key, then claims the library's way.
func (d *pgLock) Claim(ctx context.Context, q dialect.Queryer, t dialect.Table, a dialect.ClaimArgs) (dialect.ClaimResult, error) {
	s := d.stmts.For(t)
	if !ownedByCore(q) {
		err := dialect.Pipeline(ctx, q,
			dialect.Statement{SQL: s.lock, Args: []any{a.Scope, a.Key, pgLockTimeout(a.WaitBound)}, Affected: func(int64) error { return nil }},
			dialect.Statement{SQL: s.restore, Affected: func(int64) error { return nil }})
		if err != nil {
			return dialect.ClaimResult{}, err
		}
		return d.Dialect.Claim(ctx, q, t, a)
	}
	var (
		found, expired bool
		rec            dialect.Record
	)
	err := dialect.Pipeline(ctx, q,
		dialect.Statement{SQL: s.lock, Args: []any{a.Scope, a.Key, pgLockTimeout(a.WaitBound)}, Affected: func(int64) error { return nil }},
		dialect.Statement{
			SQL:  s.peek,
			Args: []any{a.Scope, a.Key, pgClock(a.Now)},
			Rows: func(r dialect.Rows) (err error) { rec, expired, found, err = pgScan(r); return err },
		})
	if err != nil {
		return dialect.ClaimResult{}, err
	}
	if found && !expired {
		return dialect.ClaimResult{Record: rec}, nil
	}
	return dialect.ClaimResult{Won: true}, nil
}

// Complete writes the completed record, with COMMIT where the transaction
// can send it so.
func (d *pgLock) Complete(ctx context.Context, q dialect.Queryer, t dialect.Table, a dialect.CompleteArgs) error {
	if !ownedByCore(q) {
		return d.Dialect.Complete(ctx, q, t, a)
	}
	s := d.stmts.For(t)
	args := []any{a.Status, a.Header, a.Body, a.Scope, a.Key, a.Fingerprint, pgClock(a.Now), a.Retention.Microseconds()}
	if dialect.DeferToCommit(q, dialect.Statement{SQL: s.guarded, Args: args}) {
		return nil
	}
	n, err := q.Exec(ctx, s.upsert, args...)
	if err != nil {
		return err
	}
	if n != 1 {
		return dialect.ErrNotClaimed
	}
	return nil
}

// InsertLease takes the key's lock first, so that a lease claim and a
// claim of Do never both proceed.
func (d *pgLock) InsertLease(ctx context.Context, q dialect.Queryer, t dialect.Table, a dialect.LeaseArgs) (bool, error) {
	if err := d.lockKey(ctx, q, t, a); err != nil {
		return false, err
	}
	return d.Dialect.InsertLease(ctx, q, t, a)
}

// TakeExpired takes the key's lock first, like InsertLease.
func (d *pgLock) TakeExpired(ctx context.Context, q dialect.Queryer, t dialect.Table, a dialect.LeaseArgs) (bool, error) {
	if err := d.lockKey(ctx, q, t, a); err != nil {
		return false, err
	}
	return d.Dialect.TakeExpired(ctx, q, t, a)
}

// ResumeLease takes the key's lock first, like InsertLease.
func (d *pgLock) ResumeLease(ctx context.Context, q dialect.Queryer, t dialect.Table, a dialect.LeaseArgs) (bool, error) {
	if err := d.lockKey(ctx, q, t, a); err != nil {
		return false, err
	}
	return d.Dialect.ResumeLease(ctx, q, t, a)
}

func (d *pgLock) lockKey(ctx context.Context, q dialect.Queryer, t dialect.Table, a dialect.LeaseArgs) error {
	_, err := q.Exec(ctx, d.stmts.For(t).lock, a.Scope, a.Key, pgLockTimeout(a.WaitBound))
	return err
}
