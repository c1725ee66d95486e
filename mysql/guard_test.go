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

// On a Galera node a claim runs only in a guarded transaction: one idem
// began, or one Begin started for the caller (its session is marked); in
// any other it is refused before it writes. Complete probes no savepoint (a
// RELEASE would drop every savepoint set after it).
func TestGaleraGuard(t *testing.T) {
	table, _ := dialect.NewTable("t")
	ctx := context.Background()
	claim := func(d *mysqlDialect, q dialect.Queryer) error {
		_, err := d.Claim(ctx, q, table, dialect.ClaimArgs{Scope: "s", Key: "k", Fingerprint: []byte("fp"), Now: time.Now(), Retention: time.Hour, WaitBound: time.Second})
		return err
	}
	complete := func(d *mysqlDialect, q dialect.Queryer) error {
		return d.Complete(ctx, q, table, dialect.CompleteArgs{Scope: "s", Key: "k", Fingerprint: []byte("fp"), Status: 200, Now: time.Now(), Retention: time.Hour})
	}
	plain := func(r *recorder) dialect.Queryer { return r }
	own := func(r *recorder) dialect.Queryer { return ownTx{r} }
	unmarked := map[string]answer{"SELECT @@autocommit": {rows: [][]any{{int64(0)}}}, "SET STATEMENT": {n: 1}}
	marked := map[string]answer{"SELECT @@autocommit": {rows: [][]any{{int64(1)}}}, "SET STATEMENT": {n: 1}}
	for _, tc := range []struct {
		name    string
		galera  bool
		q       func(*recorder) dialect.Queryer
		answers map[string]answer
		call    func(d *mysqlDialect, q dialect.Queryer) error
		want    error
		ran     []string
	}{
		{"claim, caller's own transaction", true, plain, unmarked, claim, dialect.ErrInvalidConfig, []string{"SELECT @@autocommit"}},
		{"claim, caller's transaction from Begin", true, plain, marked, claim, nil, []string{"SELECT @@autocommit", "SET STATEMENT"}},
		{"claim, idem's transaction", true, own, map[string]answer{"SET STATEMENT": {n: 1}}, claim, nil, []string{"SET STATEMENT"}},
		{"claim, not Galera", false, plain, map[string]answer{"SET STATEMENT": {n: 1}}, claim, nil, []string{"SET STATEMENT"}},
		{"complete, nothing completed", true, own, map[string]answer{"UPDATE": {n: 0}}, complete, dialect.ErrNotClaimed, []string{"UPDATE `t`"}},
		{"complete", true, plain, map[string]answer{"UPDATE": {n: 1}}, complete, nil, []string{"UPDATE `t`"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := newDialect(0)
			d.perStatementWait, d.certified, d.guarded = true, tc.galera, tc.galera
			r := &recorder{answers: tc.answers}
			err := tc.call(d, tc.q(r))
			if tc.want == nil && err != nil || tc.want != nil && !errors.Is(d.Classify(err), tc.want) {
				t.Errorf("error %v, want %v", err, tc.want)
			}
			if got := r.firstWords(); !slices.Equal(got, tc.ran) {
				t.Errorf("ran %q, want %q", got, tc.ran)
			}
		})
	}
}

// A savepoint the transaction no longer has (1305) is the unseen abort.
func TestReleaseSavepoint(t *testing.T) {
	gone := &mysqldriver.MySQLError{Number: erSPDoesNotExist, Message: "SAVEPOINT idem_tx does not exist"}
	err := releaseSavepoint(context.Background(), &recorder{answers: map[string]answer{"RELEASE": {err: gone}}}, txSavepoint)
	if !errors.Is(err, errAbortedUnseen) || !errors.Is(err, gone) {
		t.Errorf("RELEASE of a savepoint gone: %v, want errAbortedUnseen wrapping the server's error", err)
	}
	if err := releaseSavepoint(context.Background(), &recorder{}, txSavepoint); err != nil {
		t.Errorf("RELEASE of a savepoint there: %v", err)
	}
}

// Behind vtgate a ROLLBACK of a transaction a tablet already ended is no
// error; any other error of a ROLLBACK is.
func TestEndedByTablet(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{&mysqldriver.MySQLError{Number: 1317, Message: "target: idem.-80.primary: vttablet: rpc error: code = Aborted desc = transaction 1796385587901130144: ended at 2026-12-04 11:59:57.621 UTC (unlocked closed connection) (CallerID: userData1)"}, true},
		{&mysqldriver.MySQLError{Number: 1317, Message: "vttablet: rpc error: code = Aborted desc = transaction 17: ended at 2026-12-04 11:59:57.621 UTC (transaction committed) (CallerID: userData1)"}, false},
		{&mysqldriver.MySQLError{Number: 1317, Message: `multi-db transaction attempted: [target:{keyspace:"idem" shard:"-80"}]`}, false},
		{&mysqldriver.MySQLError{Number: 1105, Message: "transaction 1: ended at 2026-12-04"}, false},
		{errors.New("driver: bad connection"), false},
		{nil, false},
	} {
		if got := endedByTablet(tc.err); got != tc.want {
			t.Errorf("endedByTablet(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
