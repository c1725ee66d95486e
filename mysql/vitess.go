package mysql

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	mysqldriver "github.com/go-sql-driver/mysql"

	"github.com/idemkit/idem/dialect"
)

// Behind Vitess's vtgate (New tells it by the version vtgate reports,
// "…-Vitess"), a keyspace may be split into shards, each a MySQL database of
// its own. idem's promise needs one thing of the database: the claim, the
// function's writes and the completion commit in one transaction. On a
// sharded keyspace that holds when all three are on one shard, so the rule
// is co-location: a record lives on the shard of the effect it protects.
// For idem:
//
//   - Routing. Migrate puts idem's tables into the keyspace's VSchema: the
//     records by VitessOptions.ShardBy (the scope by default: a tenant's
//     records on one shard) through a vindex of type xxhash
//     (VitessOptions.Vindex); the version and fence tables, a few rows
//     each, live on the first shard (a vindex of Vitess's type null).
//     Route your effect tables by the same vindex type on a column that
//     holds the same value (the tenant), and each record is beside its
//     effect. ALTER VSCHEMA has no IF NOT EXISTS: Migrate reads each
//     table's vindexes first (Schema.Prepare), and refuses a table routed
//     otherwise. Unsharded keyspaces need no VSchema.
//
//   - Atomicity. New accepts only vtgate's transaction_mode SINGLE, which
//     refuses a second shard's write (1317, "multi-db transaction
//     attempted", ErrCrossShard) and rolls the whole transaction back.
//     MULTI commits each shard separately, so a record could commit without
//     its effect; TWOPC (atomic across shards) is untested here, since it
//     needs semi-sync replication, which vttestserver lacks.
//
//   - After that refusal vtgate's session is outside any transaction, and
//     a function that swallows the error would run its next statements in
//     autocommit. So every transaction idem begins behind vtgate is guarded
//     as on a Galera node (guard.go): autocommit off, a savepoint checked
//     before COMMIT; a swallowed refusal ends in a rollback, never in a
//     partial commit or a completion of another worker's claim. The
//     guard's limit: vtgate sends RELEASE SAVEPOINT to every shard the
//     transaction touched, reads included, and counts it as a write
//     there, so a transaction that read a second shard is refused at the
//     check (1317, ErrCrossShard) with nothing committed. Inside the
//     function read only the record's shard; read others before Do.
//
//   - Lock waits. SET SESSION innodb_lock_wait_timeout behind vtgate first
//     reads the variable on a shard, which joins that shard to the
//     transaction (so a claim on the other shard is refused under SINGLE),
//     and cannot be set back to DEFAULT; so idem does not set it. Each of
//     the claim's statements carries vtgate's QUERY_TIMEOUT_MS directive
//     instead (the wait bound, rounded up to whole seconds as on MySQL):
//     vttablet ends a statement that runs longer, and in a transaction
//     kills its connection, so the transaction ends with it (3024, or
//     1317 "DeadlineExceeded" when vtgate's own deadline for the call to
//     the tablet fires first; both ErrLockTimeout: InFlight, as a lock
//     wait timeout elsewhere). The directive bounds the
//     whole statement, not only its lock wait; a claim slower than the
//     bound for another reason is reported InFlight too.
//
//   - Errors. vtgate passes MySQL's numbers through (1062, 1213, 1205);
//     its own are 1317 (a transaction it ended: the cross-shard refusal,
//     or one the tablet's transaction killer or a lost connection ended,
//     which a retry may cure), 1203 (a tablet's transaction pool is full)
//     and 3024 (a query timeout killed the statement's connection and its
//     transaction).
//
//   - Statements that span shards: a scatter read (admin listing) is
//     allowed; a DELETE or UPDATE on several shards is refused under
//     SINGLE, even in autocommit. So a batch (DoBatch) claims and completes
//     key by key, each statement on its key's shard, and is refused when
//     its keys live on two shards; Purge deletes one routing value's
//     expired records per batch (purgeRouted) and goes on until a batch
//     finds none. The token floor of lease mode (the fence table, on the
//     first shard) is read and raised on a session of its own, outside the
//     transaction, which would otherwise span two shards (fenceSession).

// ErrCrossShard marks vtgate's refusal of a write on a second shard in a
// transaction that already wrote on another (transaction_mode SINGLE), or
// of the savepoint check before COMMIT in a transaction that read a second
// shard: vtgate rolled the whole transaction back. Classify matches it. A
// function that writes beside its record on another shard gets the
// refusal, and Do returns the function's error unchanged, having stored
// nothing: test it with errors.Is(driver.Dialect().Classify(err),
// mysql.ErrCrossShard). Route the effect's table so that it lives on the
// record's shard.
var ErrCrossShard = errors.New("mysql: vtgate refused a write on a second shard of the transaction (transaction_mode SINGLE) and rolled it back")

// VitessOptions say how idem's tables are routed on a sharded Vitess
// keyspace. They are ignored elsewhere.
type VitessOptions struct {
	// ShardBy is the column of idem's table whose value picks a record's
	// shard: "scope" (the default), so that a scope's records (a tenant's)
	// live on one shard, or "idem_key", so that each key's record lives on
	// the shard of an effect routed by the key.
	ShardBy string
	// Vindex names the keyspace's vindex, of type xxhash, that routes
	// idem's tables (default "xxhash"). Migrate creates it when the
	// keyspace lacks it. Route the tables of your effects by a vindex of
	// the same type, on the column that holds the record's ShardBy value.
	Vindex string
}

// identifier is what VitessOptions.Vindex may be.
var identifier = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,63}$`)

// withDefaults checks o and fills in its defaults.
func (o VitessOptions) withDefaults() (VitessOptions, error) {
	switch o.ShardBy {
	case "":
		o.ShardBy = "scope"
	case "scope", "idem_key":
	default:
		return o, fmt.Errorf("mysql: %w: VitessOptions.ShardBy %q: want \"scope\" or \"idem_key\"", dialect.ErrInvalidConfig, o.ShardBy)
	}
	if o.Vindex == "" {
		o.Vindex = "xxhash"
	}
	if !identifier.MatchString(o.Vindex) {
		return o, fmt.Errorf("mysql: %w: VitessOptions.Vindex %q is not a plain identifier", dialect.ErrInvalidConfig, o.Vindex)
	}
	return o, nil
}

// isVitess reports whether version, the server's @@version, is vtgate's.
func isVitess(version string) bool {
	return strings.HasSuffix(strings.ToLower(version), "-vitess")
}

// vitessSession is what New reads from vtgate.
type vitessSession struct {
	keyspace string
	sharded  bool
}

// inspectVitess reads vtgate's transaction mode, refusing MULTI, and
// whether the session's keyspace is sharded.
func inspectVitess(ctx context.Context, q dialect.Queryer) (vitessSession, error) {
	var v vitessSession
	var mode string
	err := dialect.Run(ctx, q, dialect.Statement{SQL: "SELECT @@transaction_mode, DATABASE()", Rows: func(r dialect.Rows) error {
		if !r.Next() {
			return errors.New("no row")
		}
		var keyspace *string
		if err := r.Scan(&mode, &keyspace); err != nil {
			return err
		}
		if keyspace != nil {
			v.keyspace = *keyspace
		}
		return r.Err()
	}})
	if err != nil {
		return v, fmt.Errorf("mysql: read vtgate's transaction mode: %w", err)
	}
	switch strings.ToUpper(mode) {
	case "SINGLE":
	case "TWOPC":
		return v, fmt.Errorf("mysql: %w: vtgate's transaction_mode is TWOPC, which idem has not been tested with (it needs semi-sync "+
			"replication, which vttestserver lacks); use SINGLE (vtgate's --transaction-mode, or transaction_mode=%%27SINGLE%%27 in the DSN)", dialect.ErrInvalidConfig)
	default:
		return v, fmt.Errorf("mysql: %w: vtgate's transaction_mode is %s, under which a transaction that writes on two shards commits on each "+
			"separately, so a record could commit without its effect; use SINGLE (vtgate's --transaction-mode, or transaction_mode=%%27SINGLE%%27 "+
			"in the DSN)", dialect.ErrInvalidConfig, mode)
	}
	if v.keyspace == "" {
		return v, fmt.Errorf("mysql: %w: the DSN names no keyspace (vtgate's database)", dialect.ErrInvalidConfig)
	}
	// A keyspace may be named with a target (keyspace@primary).
	name, _, _ := strings.Cut(v.keyspace, "@")
	found := false
	err = dialect.Run(ctx, q, dialect.Statement{SQL: "SHOW VSCHEMA KEYSPACES", Rows: func(r dialect.Rows) error {
		for r.Next() {
			var ks, sharded, fk, comment *string
			if err := r.Scan(&ks, &sharded, &fk, &comment); err != nil {
				return err
			}
			if ks != nil && *ks == name {
				found, v.sharded = true, sharded != nil && *sharded == "true"
			}
		}
		return r.Err()
	}})
	if err != nil {
		return v, fmt.Errorf("mysql: read vtgate's keyspaces: %w", err)
	}
	if !found {
		return v, fmt.Errorf("mysql: %w: vtgate has no keyspace %q", dialect.ErrInvalidConfig, name)
	}
	return v, nil
}

// route is one of idem's tables, the vindex that routes it, the vindex's
// type and the column it reads.
type route struct{ table, vindex, kind, column string }

// firstShard names the vindex, of Vitess's type null, that keeps idem's
// version and fence tables (a few rows each) on the keyspace's first shard.
const firstShard = "idem_first_shard"

// vschemaPrepare returns Schema.Prepare on a sharded keyspace: each of
// idem's tables gets its vindex unless it has it. The VSchema may name a
// table before it exists, so this runs before the DDL.
func vschemaPrepare(t dialect.Table, o VitessOptions) func(context.Context, dialect.Queryer) error {
	routes := []route{
		{t.Index("schema"), firstShard, "`null`", "version"},
		{t.Name(), o.Vindex, "xxhash", o.ShardBy},
		{t.Index("fence"), firstShard, "`null`", "id"},
	}
	return func(ctx context.Context, q dialect.Queryer) error {
		for _, r := range routes {
			if err := ensureVindex(ctx, q, r); err != nil {
				return err
			}
		}
		return nil
	}
}

// erNoSuchTable: SHOW VSCHEMA VINDEXES ON a table the VSchema lacks
// (VT05005).
const erNoSuchTable = 1146

// vschemaAttempts bounds ensureVindex's attempts: vtgate refuses an ALTER
// VSCHEMA whose session read an older VSchema than the topology's (another
// table's Migrate changed it meanwhile), asking to try again.
const vschemaAttempts = 20

// ensureVindex routes r's table by its vindex unless the VSchema already
// does, trying again while vtgate reports a VSchema changed meanwhile; a
// table routed otherwise is refused.
func ensureVindex(ctx context.Context, q dialect.Queryer, r route) (err error) {
	for attempt := 1; ; attempt++ {
		err = ensureVindexOnce(ctx, q, r)
		if err == nil || !staleVSchema(err) || attempt == vschemaAttempts {
			return err
		}
		select {
		case <-ctx.Done():
			return errors.Join(err, ctx.Err())
		case <-time.After(time.Duration(attempt) * 20 * time.Millisecond):
		}
	}
}

// staleVSchema reports vtgate's refusal of a VSchema change made on a
// VSchema another change replaced (1105: "the session's version was
// stale; please try again").
func staleVSchema(err error) bool {
	var me *mysqldriver.MySQLError
	return errors.As(err, &me) && me.Number == erUnknownError && strings.Contains(me.Message, "version was stale")
}

// erUnknownError is vtgate's number for an error of its own that has none
// of MySQL's.
const erUnknownError = 1105

// ensureVindexOnce is one attempt of ensureVindex.
func ensureVindexOnce(ctx context.Context, q dialect.Queryer, r route) error {
	var have []string
	err := dialect.Run(ctx, q, dialect.Statement{SQL: "SHOW VSCHEMA VINDEXES ON `" + r.table + "`", Rows: func(rows dialect.Rows) error {
		for rows.Next() {
			var columns, name, typ, params, owner *string
			if err := rows.Scan(&columns, &name, &typ, &params, &owner); err != nil {
				return err
			}
			if columns != nil && name != nil {
				have = append(have, *name+"("+*columns+")")
			}
		}
		return rows.Err()
	}})
	if err != nil && !isNumber(err, erNoSuchTable) {
		return fmt.Errorf("mysql: read the vindexes of %s: %w", r.table, err)
	}
	want := r.vindex + "(" + r.column + ")"
	switch {
	case len(have) == 0:
		if _, err := q.Exec(ctx, "ALTER VSCHEMA ON `"+r.table+"` ADD VINDEX "+want+" USING "+r.kind); err != nil {
			return fmt.Errorf("mysql: route %s by %s: %w", r.table, want, err)
		}
		return nil
	case have[0] == want:
		return nil
	default:
		return fmt.Errorf("mysql: %w: the VSchema routes %s by %s, the options by %s", dialect.ErrInvalidConfig, r.table, strings.Join(have, ", "), want)
	}
}

// purgeRouted is Purge on a sharded keyspace: one batch on one shard, the
// expired records of the routing value (VitessOptions.ShardBy) of the oldest
// expired record, which a read on the fence session finds across the shards
// without joining them to the transaction. Up to a.Limit of them are locked
// (SKIP LOCKED), the token floor is raised on the fence session, then they
// are deleted by primary key: the routing value and a list of the other
// key column's values. The store goes on to the next value with the next
// batch (Capabilities.PartialPurgeBatches). When every expired record of
// that value is locked, the batch is empty and the purge ends early; the
// next one takes them.
func (d *mysqlDialect) purgeRouted(ctx context.Context, q dialect.Queryer, t dialect.Table, a dialect.PurgeArgs) (int64, error) {
	s := d.stmts.For(t)
	routed, other := d.vschema.ShardBy, "idem_key"
	if routed == "idem_key" {
		other = "scope"
	}
	oldest, err := query(ctx, d.fence, uncached("SELECT `"+routed+"` FROM "+s.quoted+
		" WHERE expires_at <= "+now+" ORDER BY expires_at LIMIT 1"), clock(a.Now))
	if err != nil {
		return 0, err
	}
	var route []byte
	if oldest.Next() {
		err = oldest.Scan(&route)
	}
	if err := errors.Join(err, dialect.CloseRows(oldest)); err != nil || route == nil {
		return 0, err
	}
	rows, err := query(ctx, q, "SELECT scope, idem_key, token FROM "+s.quoted+" WHERE `"+routed+"` = ? AND expires_at <= "+now+
		" ORDER BY expires_at LIMIT ? FOR UPDATE SKIP LOCKED", route, clock(a.Now), a.Limit)
	if err != nil {
		return 0, err
	}
	keys, highest, err := scanPurgeBatch(rows)
	if err != nil {
		return 0, err
	}
	// The floor first: on its own session, it must be in place before the
	// deletes commit.
	if err := d.raiseFloor(ctx, q, s, highest); err != nil {
		return 0, err
	}
	first := 1 // where the other column's value is in each (scope, key) pair
	if other == "scope" {
		first = 0
	}
	var n int64
	for len(keys) > 0 {
		chunk := keys[:min(len(keys), 2*purgeChunk)]
		keys = keys[len(chunk):]
		args := []any{route}
		for i := first; i < len(chunk); i += 2 {
			args = append(args, chunk[i])
		}
		deleted, err := exec(ctx, q, "DELETE FROM "+s.quoted+" WHERE `"+routed+"` = ? AND `"+other+"` IN (?"+
			strings.Repeat(", ?", len(args)-2)+")", args...)
		if err != nil {
			return 0, err
		}
		n += deleted
	}
	return n, nil
}

// settleBound bounds vtgateServes's wait.
const settleBound = 2 * time.Minute

// vtgateServes returns Schema.Settle behind vtgate: it reads every column
// of the table's latest schema, through vtgate, until vtgate no longer
// refuses one as unknown (1054): vtgate tracks the tables' columns and
// learns those an ALTER TABLE added from the tablets a moment later.
//
// The probe names every column of the latest migration (migrations/*.sql):
// a migration that adds one adds it here.
func vtgateServes(t dialect.Table) func(context.Context, dialect.Queryer) error {
	probe := "SELECT scope, idem_key, fingerprint, status, header, body, created_at, expires_at, token, lease_until, step, step_data FROM `" +
		t.Name() + "` WHERE scope = '' AND idem_key = ''"
	return func(ctx context.Context, q dialect.Queryer) error {
		bounded, cancel := context.WithTimeout(ctx, settleBound)
		defer cancel()
		for {
			_, err := q.Exec(bounded, probe)
			if !isNumber(err, erBadFieldError) {
				return err
			}
			select {
			case <-bounded.Done():
				if ctx.Err() != nil {
					return fmt.Errorf("mysql: waiting for vtgate to learn %s's columns: %w (last: %w)", t.Name(), ctx.Err(), err)
				}
				return fmt.Errorf("mysql: vtgate did not learn %s's columns within %s: %w", t.Name(), settleBound, err)
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
}

// erBadFieldError: an unknown column.
const erBadFieldError = 1054

// Error numbers vtgate gives for its own errors.
const (
	erQueryInterrupted = 1317 // vtgate: ABORTED (a transaction it ended)
	erTooManyUserConns = 1203 // vtgate: RESOURCE_EXHAUSTED (a tablet's transaction pool is full)
	erQueryTimeout     = 3024 // vttablet: a query timeout killed the connection
)

// classifyVitess maps vtgate's own errors; it returns nil for the others.
func classifyVitess(err error, me *mysqldriver.MySQLError) error {
	switch me.Number {
	case erQueryInterrupted:
		if strings.Contains(me.Message, "multi-db transaction attempted") {
			return dialect.Classified(dialect.ErrTxAborted, &crossShardError{err})
		}
		if deadlineExceeded(me.Message) {
			// vtgate's deadline for a statement's call to its tablet
			// (the claim's QUERY_TIMEOUT_MS) fired before the tablet's
			// answer, 3024: the same bound, seen from vtgate.
			return dialect.Classified(dialect.ErrLockTimeout, err)
		}
		// The tablet's transaction killer, a lost connection, or vtgate
		// rolled the transaction back: a retry begins afresh.
		return dialect.Classified(dialect.ErrSerialization, err)
	case erTooManyUserConns:
		return dialect.Classified(dialect.ErrUnavailable, err)
	case erQueryTimeout:
		return dialect.Classified(dialect.ErrLockTimeout, err)
	}
	return nil
}

// deadlineExceeded reports vtgate's text for a call to a tablet that ran
// out of time: gRPC's DeadlineExceeded, or Go's context error.
func deadlineExceeded(message string) bool {
	return strings.Contains(message, "DeadlineExceeded") || strings.Contains(message, "context deadline exceeded")
}

// vitessCommitError classifies an error from COMMIT behind vtgate. vtgate
// reports a tablet's lost connection to its MySQL, a deadline passed and a
// transaction the tablet ended alike (1317, or 3024), and may do so after
// the shard committed: any server error there leaves the outcome unknown,
// but the refusal of a second shard, which vtgate checks before it sends
// COMMIT. Errors of the connection are commitError's.
func vitessCommitError(err error) error {
	var me *mysqldriver.MySQLError
	if !errors.As(err, &me) {
		return commitError(err)
	}
	if c := classifyVitess(err, me); c != nil && errors.Is(c, ErrCrossShard) {
		return c
	}
	return dialect.Classified(dialect.ErrCommitUnknown, err)
}

// crossShardError is vtgate's refusal, matching ErrCrossShard.
type crossShardError struct{ err error }

func (e *crossShardError) Error() string   { return e.err.Error() }
func (e *crossShardError) Unwrap() []error { return []error{ErrCrossShard, e.err} }
