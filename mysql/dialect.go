package mysql

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/idemkit/idem/dialect"
)

// mysqlDialect is MySQL's and MariaDB's statements and error-number mapping.
type mysqlDialect struct {
	// maxPacket is the server's max_allowed_packet; 0 means unknown.
	maxPacket int64
	// perStatementWait: the server can bound one statement's wait
	// (MariaDB's SET STATEMENT, vtgate's QUERY_TIMEOUT_MS; waitBound), so
	// the claim's statements carry their own bound.
	perStatementWait bool
	stmts            *dialect.Statements[statements]
	bounds           sync.Map // boundKey -> *claimStatements

	// causalLookups: a MariaDB Galera node; lookups wait until the node
	// has applied what the cluster committed before them (galera.go).
	causalLookups bool
	// groupMember: a MySQL Group Replication member, where read-only
	// (1290) means "not the primary now": another member, or this one
	// after an election, takes the write (grouprepl.go).
	groupMember bool
	// certified: a Galera node (MariaDB's or Percona XtraDB Cluster's),
	// where a transaction meets other nodes' writes at COMMIT
	// (Capabilities.ConflictsAtCommit, galera.go).
	certified bool
	// guarded: transactions idem begins are guarded against a rollback no
	// statement reported (guard.go): on a Galera node, and behind vtgate
	// (vitess.go).
	guarded bool
	// vitess: the server is Vitess's vtgate, where a session variable set
	// in a transaction joins a shard to it (vitess.go); vschema, when not
	// nil, routes idem's tables on a sharded keyspace.
	vitess  bool
	vschema *VitessOptions
	// fence, when not nil, is the connection of its own that reads and
	// raises the token floor (fenceSession, fence.go).
	fence *fenceSession
	// latestLockedReads: the claim's statements run with
	// innodb_snapshot_isolation=OFF, so that a loser's locking read (and a
	// takeover) acts on the latest committed record, as everywhere else,
	// instead of failing with 1020 when the caller's transaction took its
	// snapshot before the winner committed.
	latestLockedReads bool
}

var _ dialect.Dialect = (*mysqlDialect)(nil)

// NewDialect returns the MySQL dialect without a connection: for rendering
// the migrations (migrationfiles, the idem CLI). New makes its own, which
// knows the server's max_allowed_packet and kind.
func NewDialect() dialect.Dialect { return newDialect(0) }

// newDialect returns the dialect for a server whose max_allowed_packet is
// maxAllowedPacket (0 if unknown: no size check before sending).
func newDialect(maxAllowedPacket int64) *mysqlDialect {
	return &mysqlDialect{maxPacket: maxAllowedPacket, stmts: dialect.NewStatements(newStatements)}
}

// Name returns "mysql".
func (*mysqlDialect) Name() string { return "mysql" }

// Capabilities reports row-level locks (a loser waits on the key only) and,
// on a Galera node, conflicts with other nodes found at COMMIT.
func (d *mysqlDialect) Capabilities() dialect.Capabilities {
	return dialect.Capabilities{ConflictsAtCommit: d.certified, PartialPurgeBatches: d.vschema != nil}
}

// Schema returns the versioned DDL (migrations/*.sql); on a sharded
// Vitess keyspace, preceded by the VSchema that routes the tables.
func (d *mysqlDialect) Schema(t dialect.Table) dialect.Schema {
	s := d.stmts.For(t).schema
	if d.vschema != nil {
		s.Prepare = vschemaPrepare(t, *d.vschema)
	}
	if d.vitess {
		s.Settle = vtgateServes(t)
	}
	return s
}

// Claim inserts the in-flight record. A duplicate key means another
// transaction holds or held it: read it with a locking read, take it over if
// expired, else report it.
//
// Every statement that may wait for a lock waits at most the wait bound. On
// MariaDB and behind vtgate each carries its own bound (waitBound); MySQL
// has no SET STATEMENT (and its SET_VAR hint does not apply to InnoDB's
// variables), so there the session's value is set around the claim and put
// back after it.
func (d *mysqlDialect) Claim(ctx context.Context, q dialect.Queryer, t dialect.Table, a dialect.ClaimArgs) (res dialect.ClaimResult, err error) {
	if d.guarded && !inTransaction(q) {
		if err := checkCallerClaim(ctx, q); err != nil {
			return res, err
		}
	}
	s := d.stmts.For(t)
	c := &s.claim
	if d.perStatementWait {
		c = d.bounded(t, s, a.WaitBound)
	} else {
		var restore func() error
		restore, err = d.sessionWait(ctx, q, s, lockWaitSeconds(a.WaitBound))
		if err != nil {
			return res, err
		}
		defer func() {
			if rerr := restore(); rerr != nil && err == nil {
				err = rerr
			}
		}()
	}

	now := sql.Named("now", clock(a.Now))
	scope, key, fingerprint := sql.Named("scope", a.Scope), sql.Named("key", a.Key), sql.Named("fingerprint", a.Fingerprint)
	retention := sql.Named("retention_us", a.Retention.Microseconds())
	_, err = execNamed(ctx, q, c.claim, scope, key, fingerprint, now, retention)
	if err == nil {
		return dialect.ClaimResult{Won: true}, nil
	}
	if !isNumber(err, erDupEntry) {
		return res, err
	}

	rec, expired, found, err := d.read(ctx, q, false, c.peek, a.Scope, a.Key, a.Now)
	if err != nil {
		return res, err
	}
	if !found {
		// Purged between the two statements: a retry inserts it afresh.
		return res, dialect.Classified(dialect.ErrSerialization, errors.New("mysql: conflicting record vanished before it could be read"))
	}
	if !expired {
		return dialect.ClaimResult{Record: rec}, nil
	}
	n, err := execNamed(ctx, q, c.takeover, scope, key, fingerprint, now, retention)
	if err != nil {
		return res, err
	}
	if n != 1 {
		return res, dialect.Classified(dialect.ErrSerialization, errors.New("mysql: expired record changed during takeover"))
	}
	return dialect.ClaimResult{Won: true}, nil
}

// sessionWait sets the session's innodb_lock_wait_timeout to secs for the
// statements that follow (MySQL, which has no SET STATEMENT) and returns
// what puts it back. The variable outlives the transaction: restore puts it
// back even when ctx has ended, within a bound.
func (d *mysqlDialect) sessionWait(ctx context.Context, q dialect.Queryer, s *statements, secs int64) (restore func() error, err error) {
	if _, err := execNamed(ctx, q, s.lockWaitSet, sql.Named("seconds", secs)); err != nil {
		return nil, err
	}
	return func() error {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_, err := q.Exec(rctx, s.lockWaitRestore.SQL)
		return err
	}, nil
}

// Complete stores the response on the in-flight record. A body the server
// could not accept in one packet is refused before it is sent.
func (d *mysqlDialect) Complete(ctx context.Context, q dialect.Queryer, t dialect.Table, a dialect.CompleteArgs) error {
	if err := d.fits(a.Header, a.Body); err != nil {
		return err
	}
	n, err := execNamed(ctx, q, d.stmts.For(t).complete,
		sql.Named("scope", a.Scope), sql.Named("key", a.Key), sql.Named("fingerprint", a.Fingerprint),
		sql.Named("status", a.Status), sql.Named("header", a.Header), sql.Named("body", a.Body),
		sql.Named("now", clock(a.Now)), sql.Named("retention_us", a.Retention.Microseconds()))
	if err != nil {
		return err
	}
	if n != 1 {
		return dialect.ErrNotClaimed
	}
	return nil
}

// fits refuses, before it is sent, a response the server could not accept
// in one packet.
func (d *mysqlDialect) fits(header, body []byte) error {
	if size := int64(len(body) + len(header) + packetOverhead); d.maxPacket > 0 && size > d.maxPacket {
		return dialect.Classified(dialect.ErrTooLarge,
			fmt.Errorf("mysql: response of %d bytes does not fit the server's max_allowed_packet of %d", size, d.maxPacket))
	}
	return nil
}

// packetOverhead leaves room in a packet for the statement and the other
// columns next to the header and body.
const packetOverhead = 4096

// Lookup reads the live record with a plain (consistent) read; on Galera a
// causal one.
func (d *mysqlDialect) Lookup(ctx context.Context, q dialect.Queryer, t dialect.Table, a dialect.LookupArgs) (dialect.Record, bool, error) {
	s := d.stmts.For(t)
	stmt := s.read
	if d.causalLookups {
		stmt = s.causalRead
	}
	rec, expired, found, err := d.read(ctx, q, true, stmt, a.Scope, a.Key, a.Now)
	if d.causalLookups {
		err = causalReadError(err)
	}
	if err != nil || !found || expired {
		return dialect.Record{}, false, err
	}
	return rec, true, nil
}

// read runs one of the record reads (read or peek, at @scope, @key and
// @now); it reports whether the record has expired by the store's clock.
func (d *mysqlDialect) read(ctx context.Context, q dialect.Queryer, lookup bool, stmt dialect.Query, scope, key string, now time.Time) (rec dialect.Record, expired, found bool, err error) {
	args, err := stmt.Args(sql.Named("scope", scope), sql.Named("key", key), sql.Named("now", clock(now)))
	if err != nil {
		return rec, false, false, err
	}
	var rows dialect.Rows
	if _, prepares := q.(dialect.Preparer); lookup && prepares {
		// A lookup where statements stay prepared (the driver's pool):
		// one round trip the server need not parse again.
		rows, err = dialect.QueryPrepared(ctx, q, stmt.SQL, args...)
	} else {
		rows, err = query(ctx, q, stmt.SQL, args...)
	}
	if err != nil {
		return rec, false, false, err
	}
	defer rows.Close()
	if !rows.Next() {
		return rec, false, false, dialect.CloseRows(rows)
	}
	rec, expired, err = scanRecord(rows)
	if err != nil {
		return rec, false, false, err
	}
	return rec, expired, true, dialect.CloseRows(rows)
}

// scanRecord reads the current row's columns (the "columns" part of
// queries/_parts.sql) and judges expiry by the read's clock.
func scanRecord(rows dialect.Rows) (rec dialect.Record, expired bool, err error) {
	var (
		status, lease         *int64
		created, expires, now int64
		step                  []byte
	)
	if err := rows.Scan(&rec.Scope, &rec.Key, &rec.Fingerprint, &status, &rec.Header, &rec.Body, &created, &expires,
		&rec.Token, &lease, &step, &rec.StepData, &now); err != nil {
		return rec, false, err
	}
	rec.State = dialect.Pending
	if status != nil {
		rec.State, rec.Status = dialect.Completed, int(*status)
	}
	rec.CreatedAt, rec.ExpiresAt = time.UnixMicro(created).UTC(), time.UnixMicro(expires).UTC()
	if lease != nil {
		rec.LeaseUntil, rec.LeaseExpired = time.UnixMicro(*lease).UTC(), *lease <= now
	}
	rec.Step = string(step)
	return rec, expires <= now, nil
}

// Purge locks up to a.Limit expired rows with SKIP LOCKED, so it never
// waits on a claim, and deletes them by primary key, in the core's READ
// COMMITTED transaction (where InnoDB takes no gap locks).
func (d *mysqlDialect) Purge(ctx context.Context, q dialect.Queryer, t dialect.Table, a dialect.PurgeArgs) (n int64, err error) {
	if d.vschema != nil {
		return d.purgeRouted(ctx, q, t, a)
	}
	s := d.stmts.For(t)
	rows, err := queryNamed(ctx, q, s.purge, sql.Named("now", clock(a.Now)), sql.Named("limit", a.Limit))
	if err != nil {
		return 0, err
	}
	keys, highest, err := scanPurgeBatch(rows)
	if err != nil {
		return 0, err
	}
	for len(keys) > 0 {
		chunk := keys[:min(len(keys), 2*purgeChunk)]
		keys = keys[len(chunk):]
		deleted, err := exec(ctx, q, s.purgeDelete(len(chunk)/2), chunk...)
		if err != nil {
			return 0, err
		}
		n += deleted
	}
	return n, d.raiseFloor(ctx, q, s, highest)
}

// scanPurgeBatch reads a purge batch's locked records: their keys (scope,
// key, scope, key, ...) and the largest token among them.
func scanPurgeBatch(rows dialect.Rows) (keys []any, highest int64, err error) {
	for rows.Next() {
		var (
			scope, key []byte
			token      int64
		)
		if err := rows.Scan(&scope, &key, &token); err != nil {
			rows.Close()
			return nil, 0, err
		}
		keys, highest = append(keys, scope, key), max(highest, token)
	}
	return keys, highest, dialect.CloseRows(rows)
}

// raiseFloor raises the token floor to token, the largest token a delete
// removed, after the records' rows (so a claim that holds one of them and
// reads the floor never waits on this transaction's lock of the floor
// while it holds a row this one wants).
func (d *mysqlDialect) raiseFloor(ctx context.Context, q dialect.Queryer, s *statements, token int64) error {
	if token <= 0 {
		return nil
	}
	_, err := execNamed(ctx, d.fenceSession(q), s.floorRaise, sql.Named("token", token))
	return err
}

// fenceSession is where the token floor is read and raised: q, the
// transaction, except on a sharded Vitess keyspace, where the fence lives on
// the first shard and a statement on it would join that shard to a
// transaction whose records may be on another. There a connection of its own
// (fence.go) reads it in autocommit, seeing the latest committed floor, and
// raises it before the deletes that need it commit; a floor raised for
// deletes that then roll back only makes later tokens larger.
func (d *mysqlDialect) fenceSession(q dialect.Queryer) dialect.Queryer {
	if d.fence != nil {
		return d.fence
	}
	return q
}

// purgeChunk bounds the keys one DELETE names.
const purgeChunk = 500

// clock gives the store's time in Unix microseconds, or nil for the
// database's clock.
func clock(now time.Time) any {
	if now.IsZero() {
		return nil
	}
	return now.UnixMicro()
}
