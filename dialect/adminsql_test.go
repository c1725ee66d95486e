package dialect_test

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/idemkit/idem/dialect"
)

// recorder is a Queryer that keeps the statement it is sent and fails it.
type recorder struct {
	stmt string
	args []any
}

var errRecorded = errors.New("recorded")

func (r *recorder) Exec(_ context.Context, stmt string, args ...any) (int64, error) {
	r.stmt, r.args = stmt, args
	return 0, errRecorded
}

func (r *recorder) Query(_ context.Context, stmt string, args ...any) (dialect.Rows, error) {
	r.stmt, r.args = stmt, args
	return nil, errRecorded
}

// testAdminSQL is a description in the shape of a backend's.
var testAdminSQL = dialect.AdminSQL{
	Name:         "test",
	Placeholders: dialect.Dollar,
	Quote:        func(name string) string { return `"` + name + `"` },
	Now:          `COALESCE(?, now())`,
	Ago:          `COALESCE(?, now()) - ?`,
	Length:       func(col string) string { return `octet_length(` + col + `)` },
}

func TestAdminSQLList(t *testing.T) {
	tbl, err := dialect.NewTable("idem_keys")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.FixedZone("x", 3600))
	var r recorder
	_, err = testAdminSQL.List(context.Background(), &r, tbl, dialect.ListArgs{
		ScopePrefix: "ab", States: []dialect.State{dialect.Pending}, MinAge: time.Second, MaxAge: time.Minute,
		Expiry: dialect.ExpiredOnly, AfterScope: "abc", AfterKey: "k", AfterSet: true, Limit: 10, Now: now,
	})
	if !errors.Is(err, errRecorded) {
		t.Fatalf("List: %v, want the recorder's error", err)
	}
	want := `SELECT scope, idem_key, fingerprint, status, COALESCE(octet_length(header), 0), COALESCE(octet_length(body), 0), ` +
		`created_at, expires_at, token, lease_until, step, COALESCE($1, now()) FROM "idem_keys" ` +
		`WHERE scope >= $2 AND scope < $3 AND (status IS NULL) AND created_at <= COALESCE($4, now()) - $5 ` +
		`AND created_at >= COALESCE($6, now()) - $7 AND expires_at <= COALESCE($8, now()) ` +
		`AND (scope > $9 OR (scope = $10 AND idem_key > $11)) ORDER BY scope, idem_key LIMIT 10`
	utc := now.UTC()
	args := []any{utc, "ab", "ac", utc, int64(1e6), utc, int64(60e6), utc, "abc", "abc", "k"}
	if r.stmt != want || !reflect.DeepEqual(r.args, args) {
		t.Fatalf("List sent\n%s %v\nwant\n%s %v", r.stmt, r.args, want, args)
	}
	if _, err := testAdminSQL.List(context.Background(), &r, tbl, dialect.ListArgs{States: []dialect.State{9}}); !errors.Is(err, dialect.ErrInvalidConfig) {
		t.Fatalf("List of an unknown state: %v, want ErrInvalidConfig", err)
	}
}

func TestAdminSQLDelete(t *testing.T) {
	tbl, err := dialect.NewTable("idem_keys")
	if err != nil {
		t.Fatal(err)
	}
	s := testAdminSQL
	s.Placeholders = dialect.Question
	s.Micros = func(col string) string { return col }
	now := time.UnixMicro(1_700_000_000_000_001)
	for _, c := range []struct {
		name string
		sql  func(dialect.Table, dialect.DeleteArgs, string) (string, []any, error)
		a    dialect.DeleteArgs
		suf  string
		want string
		args []any
	}{
		{"delete", s.DeleteSQL, dialect.DeleteArgs{Scope: "s", Key: "k", Now: now}, "RETURNING token",
			`DELETE FROM "idem_keys" WHERE idem_key = ? AND scope = ? AND (status IS NOT NULL OR expires_at <= COALESCE(?, now())) RETURNING token`,
			[]any{"k", "s", now.UnixMicro()}},
		{"forced delete, database's clock", s.DeleteSQL, dialect.DeleteArgs{Scope: "s", Key: "k", Force: true}, "",
			`DELETE FROM "idem_keys" WHERE idem_key = ? AND scope = ?`, []any{"k", "s"}},
		{"locking read", s.LockDeletableSQL, dialect.DeleteArgs{Scope: "s", Key: "k"}, "FOR UPDATE",
			`SELECT token FROM "idem_keys" WHERE idem_key = ? AND scope = ? AND (status IS NOT NULL OR expires_at <= COALESCE(?, now())) FOR UPDATE`,
			[]any{"k", "s", nil}},
	} {
		stmt, args, err := c.sql(tbl, c.a, c.suf)
		if err != nil || stmt != c.want || !reflect.DeepEqual(args, c.args) {
			t.Errorf("%s: %q %v %v, want %q %v", c.name, stmt, args, err, c.want, c.args)
		}
	}
}
