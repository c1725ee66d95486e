package mysql

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	mysqldriver "github.com/go-sql-driver/mysql"

	"github.com/idemkit/idem/dialect"
)

// recorder is a session that answers each statement by the first word
// pair it starts with and records what it was sent.
type recorder struct {
	answers map[string]answer // by prefix: "SELECT @@autocommit", "RELEASE", "UPDATE", ...
	ran     []string
}

func (r *recorder) answer(stmt string) answer {
	r.ran = append(r.ran, stmt)
	for prefix, a := range r.answers {
		if strings.HasPrefix(stmt, prefix) {
			return a
		}
	}
	return answer{}
}

func (r *recorder) Exec(_ context.Context, stmt string, _ ...any) (int64, error) {
	a := r.answer(stmt)
	return a.n, a.err
}

func (r *recorder) Query(_ context.Context, stmt string, _ ...any) (dialect.Rows, error) {
	a := r.answer(stmt)
	if a.err != nil {
		return nil, a.err
	}
	return &scriptedRows{rows: a.rows, next: -1}, nil
}

// firstWords is each statement's first two words, for comparing what ran.
func (r *recorder) firstWords() []string {
	var out []string
	for _, s := range r.ran {
		f := strings.Fields(s)
		out = append(out, strings.Join(f[:min(2, len(f))], " "))
	}
	return out
}

// ownTx is a transaction idem began (it has Commit).
type ownTx struct{ *recorder }

func (ownTx) Commit(context.Context) error { return nil }

// On a Galera node a claim in a caller's transaction needs autocommit off
// and sets a savepoint before it writes; Complete checks the savepoint, so
// a claim whose transaction ended unseen fails as ErrTxAborted, never as a
// success or as ErrNotClaimed.
func TestGaleraGuard(t *testing.T) {
	table, _ := dialect.NewTable("t")
	ctx := context.Background()
	gone := &mysqldriver.MySQLError{Number: erSPDoesNotExist, Message: "SAVEPOINT idem_claim does not exist"}
	claim := func(d *mysqlDialect, q dialect.Queryer) error {
		_, err := d.Claim(ctx, q, table, dialect.ClaimArgs{Scope: "s", Key: "k", Fingerprint: []byte("fp"), Now: time.Now(), Retention: time.Hour, WaitBound: time.Second})
		return err
	}
	complete := func(d *mysqlDialect, q dialect.Queryer) error {
		return d.Complete(ctx, q, table, dialect.CompleteArgs{Scope: "s", Key: "k", Fingerprint: []byte("fp"), Status: 200, Now: time.Now(), Retention: time.Hour})
	}
	for _, tc := range []struct {
		name    string
		galera  bool
		own     bool // a transaction idem began
		answers map[string]answer
		call    func(d *mysqlDialect, q dialect.Queryer) error
		want    error
		ran     []string
	}{
		{"claim, caller's, autocommit on", true, false, map[string]answer{"SELECT @@autocommit": {rows: [][]any{{int64(1)}}}},
			claim, dialect.ErrInvalidConfig, []string{"SELECT @@autocommit"}},
		{"claim, caller's, autocommit off", true, false, map[string]answer{"SELECT @@autocommit": {rows: [][]any{{int64(0)}}}, "SET STATEMENT": {n: 1}},
			claim, nil, []string{"SELECT @@autocommit", "SAVEPOINT " + claimSavepoint("s", "k"), "SET STATEMENT"}},
		{"claim, idem's", true, true, map[string]answer{"SET STATEMENT": {n: 1}},
			claim, nil, []string{"SET STATEMENT"}},
		{"claim, not Galera", false, false, map[string]answer{"SET STATEMENT": {n: 1}},
			claim, nil, []string{"SET STATEMENT"}},
		{"complete, caller's, savepoint gone", true, false, map[string]answer{"UPDATE": {n: 1}, "RELEASE": {err: gone}},
			complete, dialect.ErrTxAborted, []string{"UPDATE `t`", "RELEASE SAVEPOINT"}},
		{"complete, caller's, savepoint there", true, false, map[string]answer{"UPDATE": {n: 1}},
			complete, nil, []string{"UPDATE `t`", "RELEASE SAVEPOINT", "SAVEPOINT " + claimSavepoint("s", "k")}},
		{"complete, caller's, superseded, savepoint there", true, false, map[string]answer{"UPDATE": {n: 0}},
			complete, dialect.ErrNotClaimed, []string{"UPDATE `t`", "RELEASE SAVEPOINT", "SAVEPOINT " + claimSavepoint("s", "k")}},
		{"complete, idem's, nothing completed, savepoint gone", true, true, map[string]answer{"UPDATE": {n: 0}, "RELEASE": {err: gone}},
			complete, dialect.ErrTxAborted, []string{"UPDATE `t`", "RELEASE SAVEPOINT"}},
		{"complete, idem's, nothing completed, savepoint there", true, true, map[string]answer{"UPDATE": {n: 0}},
			complete, dialect.ErrNotClaimed, []string{"UPDATE `t`", "RELEASE SAVEPOINT", "SAVEPOINT idem_tx"}},
		{"complete, idem's, completed", true, true, map[string]answer{"UPDATE": {n: 1}},
			complete, nil, []string{"UPDATE `t`"}},
		{"complete, not Galera, nothing completed", false, false, map[string]answer{"UPDATE": {n: 0}},
			complete, dialect.ErrNotClaimed, []string{"UPDATE `t`"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := newDialect(0)
			d.perStatementWait, d.certified = true, tc.galera
			r := &recorder{answers: tc.answers}
			var q dialect.Queryer = r
			if tc.own {
				q = ownTx{r}
			}
			err := tc.call(d, q)
			if tc.want == nil && err != nil || tc.want != nil && !errors.Is(d.Classify(err), tc.want) {
				t.Errorf("error %v, want %v", err, tc.want)
			}
			if got := r.firstWords(); !slices.Equal(got, tc.ran) {
				t.Errorf("ran %q, want %q", got, tc.ran)
			}
		})
	}
}

// Each key's claim has a savepoint name of its own, a valid identifier.
func TestClaimSavepointName(t *testing.T) {
	a, b, again := claimSavepoint("s", "k1"), claimSavepoint("s", "k2"), claimSavepoint("s", "k1")
	if a == b || a != again {
		t.Errorf("names %q, %q, %q: want one per key, the same for the same key", a, b, again)
	}
	if claimSavepoint("s\x00k", "") == claimSavepoint("s", "k") {
		t.Error("scope and key run together")
	}
	if strings.Trim(a, "_abcdefghijklmnopqrstuvwxyz0123456789") != "" {
		t.Errorf("name %q is not a plain identifier", a)
	}
}
