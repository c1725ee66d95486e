package dialect_test

// The skeleton of a database/sql backend the package documentation
// describes, compiled with the package so the guide cannot drift from the
// contract. Its SQL is PostgreSQL's shape; a real backend follows its own
// database's rules (see the guide).

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"testing"
	"testing/fstest"
	"time"

	"github.com/idemkit/idem/dialect"
)

// serverError stands for a driver's typed server error.
type serverError struct{ code string }

// mydriver stands for the database/sql driver the backend runs on.
type mydriver struct{ driver.Driver }

func (e *serverError) Error() string { return "server error " + e.code }

type Options struct{ Isolation sql.IsolationLevel }

type Driver struct {
	db      *sql.DB
	level   sql.IsolationLevel
	pool    dialect.Queryer
	dialect *Dialect
}

var _ dialect.Driver[*sql.Tx] = (*Driver)(nil)

var levels = []sql.IsolationLevel{sql.LevelReadCommitted, sql.LevelSerializable}

func New(ctx context.Context, db *sql.DB, opts Options) (*Driver, error) {
	if err := dialect.CheckSQLDB[*mydriver]("mydb", db, "example.com/mydriver"); err != nil {
		return nil, err
	}
	if err := dialect.CheckIsolation("mydb", opts.Isolation, levels...); err != nil {
		return nil, err
	}
	pool, err := dialect.NewSQLQueryer(db)
	if err != nil {
		return nil, err
	}
	return &Driver{db: db, level: opts.Isolation, pool: pool, dialect: NewDialect()}, nil
}

func (d *Driver) DB() *sql.DB              { return d.db }
func (d *Driver) Dialect() dialect.Dialect { return d.dialect }
func (d *Driver) Pool() dialect.Queryer    { return d.pool }

func (d *Driver) Wrap(tx *sql.Tx) (dialect.Queryer, error) { return dialect.NewSQLQueryer(tx) }

func (d *Driver) Begin(ctx context.Context, o dialect.BeginOptions) (dialect.Tx[*sql.Tx], error) {
	level := o.IsolationOr(d.level)
	if err := dialect.CheckIsolation("mydb", level, levels...); err != nil {
		return nil, err
	}
	tx, err := dialect.BeginSQL(ctx, d.db, dialect.SQLBegin{Options: &sql.TxOptions{Isolation: level}, CommitError: commitError})
	if err != nil {
		return nil, err
	}
	return tx, nil
}

func commitError(err error) error {
	var se *serverError
	if errors.As(err, &se) {
		return err
	}
	return dialect.Classified(dialect.ErrCommitUnknown, err)
}

var migrations = fstest.MapFS{
	"migrations/0001_create_table.sql": {Data: []byte(`CREATE TABLE IF NOT EXISTS "{{.Name}}" (
	scope text NOT NULL, idem_key text NOT NULL, fingerprint bytea NOT NULL,
	status smallint, header bytea, body bytea,
	created_at timestamptz NOT NULL, expires_at timestamptz NOT NULL,
	PRIMARY KEY (scope, idem_key)
);
CREATE INDEX IF NOT EXISTS "{{.Index "expires"}}" ON "{{.Name}}" (expires_at);
`)},
}

type statements struct {
	schema                                 dialect.Schema
	claim, takeover, complete, read, purge string
}

func newStatements(t dialect.Table) *statements {
	ms, err := dialect.LoadMigrations(migrations, "migrations", t)
	if err != nil {
		panic(err)
	}
	n := `"` + t.Name() + `"`
	v := `"` + t.Index("schema") + `"`
	const now = `COALESCE($4::timestamptz, statement_timestamp())`
	return &statements{
		schema: dialect.Schema{
			Migrations:         ms,
			Lock:               `SELECT 1 FROM (SELECT pg_advisory_xact_lock(hashtext('` + t.Name() + `'))) l`,
			CreateVersionTable: `CREATE TABLE IF NOT EXISTS ` + v + ` (version int PRIMARY KEY, name text NOT NULL)`,
			ReadVersion:        `SELECT max(version) FROM ` + v,
			RecordVersion:      `INSERT INTO ` + v + ` (version, name) VALUES ($1, $2)`,
		},
		claim: `INSERT INTO ` + n + ` (scope, idem_key, fingerprint, created_at, expires_at)
VALUES ($1, $2, $3, ` + now + `, ` + now + ` + $5 * interval '1 microsecond')
ON CONFLICT (scope, idem_key) DO NOTHING RETURNING true`,
		takeover: `UPDATE ` + n + ` SET fingerprint = $3, status = NULL, header = NULL, body = NULL,
	created_at = ` + now + `, expires_at = ` + now + ` + $5 * interval '1 microsecond'
WHERE scope = $1 AND idem_key = $2 AND expires_at <= ` + now,
		complete: `UPDATE ` + n + ` SET status = $1, header = $2, body = $3,
	expires_at = GREATEST(expires_at, COALESCE($7::timestamptz, statement_timestamp()) + $8 * interval '1 microsecond')
WHERE scope = $4 AND idem_key = $5 AND fingerprint = $6 AND status IS NULL`,
		read: `SELECT scope, idem_key, fingerprint, status, header, body, created_at, expires_at
FROM ` + n + ` WHERE scope = $1 AND idem_key = $2 AND expires_at > COALESCE($3::timestamptz, statement_timestamp())`,
		purge: `DELETE FROM ` + n + ` WHERE ctid = ANY (ARRAY(SELECT ctid FROM ` + n + `
	WHERE expires_at <= COALESCE($1::timestamptz, statement_timestamp()) LIMIT $2 FOR UPDATE SKIP LOCKED))`,
	}
}

type Dialect struct {
	stmts *dialect.Statements[statements]
}

var _ dialect.Dialect = (*Dialect)(nil)

func NewDialect() *Dialect { return &Dialect{stmts: dialect.NewStatements(newStatements)} }

func (*Dialect) Name() string                       { return "mydb" }
func (*Dialect) Capabilities() dialect.Capabilities { return dialect.Capabilities{} }
func (d *Dialect) Schema(t dialect.Table) dialect.Schema {
	return d.stmts.For(t).schema
}

func (d *Dialect) Claim(ctx context.Context, q dialect.Queryer, t dialect.Table, a dialect.ClaimArgs) (dialect.ClaimResult, error) {
	s := d.stmts.For(t)
	// A real backend bounds this statement's wait by a.WaitBound.
	var won bool
	err := dialect.Run(ctx, q, dialect.Statement{
		SQL:  s.claim,
		Args: []any{a.Scope, a.Key, a.Fingerprint, clock(a.Now), a.Retention.Microseconds()},
		Rows: func(r dialect.Rows) error { won = r.Next(); return nil },
	})
	if err != nil || won {
		return dialect.ClaimResult{Won: won}, err
	}
	n, err := q.Exec(ctx, s.takeover, a.Scope, a.Key, a.Fingerprint, clock(a.Now), a.Retention.Microseconds())
	if err != nil || n == 1 {
		return dialect.ClaimResult{Won: n == 1}, err
	}
	rec, found, err := d.Lookup(ctx, q, t, dialect.LookupArgs{Scope: a.Scope, Key: a.Key, Now: a.Now})
	if err == nil && !found {
		err = dialect.Classified(dialect.ErrSerialization, errors.New("mydb: the record vanished"))
	}
	return dialect.ClaimResult{Record: rec}, err
}

func (d *Dialect) Complete(ctx context.Context, q dialect.Queryer, t dialect.Table, a dialect.CompleteArgs) error {
	n, err := q.Exec(ctx, d.stmts.For(t).complete,
		a.Status, a.Header, a.Body, a.Scope, a.Key, a.Fingerprint, clock(a.Now), a.Retention.Microseconds())
	if err == nil && n != 1 {
		err = dialect.ErrNotClaimed
	}
	return err
}

func (d *Dialect) Lookup(ctx context.Context, q dialect.Queryer, t dialect.Table, a dialect.LookupArgs) (rec dialect.Record, found bool, err error) {
	err = dialect.Run(ctx, q, dialect.Statement{
		SQL:  d.stmts.For(t).read,
		Args: []any{a.Scope, a.Key, clock(a.Now)},
		Rows: func(r dialect.Rows) error {
			if found = r.Next(); !found {
				return nil
			}
			var status *int64
			if err := r.Scan(&rec.Scope, &rec.Key, &rec.Fingerprint, &status, &rec.Header, &rec.Body, &rec.CreatedAt, &rec.ExpiresAt); err != nil {
				return err
			}
			rec.State = dialect.Pending
			if status != nil {
				rec.State, rec.Status = dialect.Completed, int(*status)
			}
			return nil
		},
	})
	return rec, found, err
}

func (d *Dialect) Purge(ctx context.Context, q dialect.Queryer, t dialect.Table, a dialect.PurgeArgs) (int64, error) {
	return q.Exec(ctx, d.stmts.For(t).purge, clock(a.Now), a.Limit)
}

func (*Dialect) Classify(err error) error {
	var se *serverError
	switch {
	case err == nil || dialect.IsClassified(err):
		return err
	case errors.As(err, &se) && se.code == "40001":
		return dialect.Classified(dialect.ErrSerialization, err)
	case errors.As(err, &se) && se.code == "55P03":
		return dialect.Classified(dialect.ErrLockTimeout, err)
	case dialect.ConnectionLost(err):
		return dialect.Classified(dialect.ErrUnavailable, err)
	}
	return err
}

func clock(now time.Time) any {
	if now.IsZero() {
		return nil
	}
	return now
}

// TestGuideSkeleton: the guide's skeleton renders its schema and maps its
// errors as the guide says.
func TestGuideSkeleton(t *testing.T) {
	table, err := dialect.NewTable("orders_keys")
	if err != nil {
		t.Fatal(err)
	}
	s := NewDialect().Schema(table)
	if len(s.Migrations) != 1 || len(s.Migrations[0].Statements) != 2 || s.Migrations[0].Name != "create_table" {
		t.Fatalf("migrations %+v, want one, create_table, of two statements", s.Migrations)
	}
	if got := NewDialect().Classify(&serverError{"40001"}); !errors.Is(got, dialect.ErrSerialization) {
		t.Errorf("Classify(40001) = %v", got)
	}
	if got := commitError(errors.New("connection reset")); !errors.Is(got, dialect.ErrCommitUnknown) {
		t.Errorf("commitError(a lost connection) = %v", got)
	}
	if _, err := New(t.Context(), nil, Options{}); !errors.Is(err, dialect.ErrInvalidConfig) {
		t.Errorf("New(nil) = %v", err)
	}
}
