package retryload_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/idemtest"
	"github.com/idemkit/idem/integration/retryload"
)

// recorder keeps the errors a Run reports instead of failing the test.
type recorder struct {
	testing.TB
	mu   sync.Mutex
	errs []string
}

func (r *recorder) Helper() {}

func (r *recorder) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

// effects is the effect table of a test on SQLite.
func effects(db *sql.DB) func(ctx context.Context) (map[string][]string, error) {
	return retryload.EffectsSQL(db, "effects")
}

// TestRunFindsBrokenPromises: each check fails a run that breaks its
// promise (an effect kept twice, a record that does not name the execution
// that committed, an answer other than the stored one, a record pending or
// lost), and a sound run passes them all.
func TestRunFindsBrokenPromises(t *testing.T) {
	for _, tc := range []struct {
		name string
		// broken changes the load so that a promise breaks.
		broken func(l *retryload.Load[*sql.Tx], db *sql.DB)
		want   string // in a reported error; "" for none
	}{
		{name: "sound"},
		{
			name: "effect written twice",
			broken: func(l *retryload.Load[*sql.Tx], _ *sql.DB) {
				l.Insert = func(ctx context.Context, tx *sql.Tx, key, nonce string) error {
					_, err := tx.ExecContext(ctx, "INSERT INTO effects (k, nonce) VALUES (?, ?), (?, ?)", key, nonce, key, nonce)
					return err
				}
			},
			want: "2 effects, want exactly one",
		},
		{
			name: "stored answer changed",
			broken: func(l *retryload.Load[*sql.Tx], db *sql.DB) {
				l.Fault = func(ctx context.Context) error {
					_, err := db.ExecContext(ctx, "UPDATE idempotency_keys SET body = CAST('other' AS BLOB) WHERE status IS NOT NULL")
					return err
				}
			},
			want: `the record answers "other"`,
		},
		{
			name: "stored status changed",
			broken: func(l *retryload.Load[*sql.Tx], db *sql.DB) {
				l.Fault = func(ctx context.Context) error {
					_, err := db.ExecContext(ctx, "UPDATE idempotency_keys SET status = 299 WHERE status IS NOT NULL")
					return err
				}
			},
			want: "the stored answer is 299",
		},
		{
			name: "records left pending",
			broken: func(l *retryload.Load[*sql.Tx], db *sql.DB) {
				l.Fault = func(ctx context.Context) error {
					_, err := db.ExecContext(ctx, "UPDATE idempotency_keys SET status = NULL, header = NULL, body = NULL")
					return err
				}
			},
			want: "its record is pending",
		},
		{
			name: "records lost",
			broken: func(l *retryload.Load[*sql.Tx], db *sql.DB) {
				l.Fault = func(ctx context.Context) error {
					_, err := db.ExecContext(ctx, "DELETE FROM idempotency_keys")
					return err
				}
			},
			want: "no record beside its effect",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lite := idemtest.NewSQLite(t, idem.Config{})
			if _, err := lite.DB.ExecContext(t.Context(), "CREATE TABLE effects (k TEXT NOT NULL, nonce TEXT NOT NULL)"); err != nil {
				t.Fatal(err)
			}
			l := &retryload.Load[*sql.Tx]{
				Store: lite.Store,
				Insert: func(ctx context.Context, tx *sql.Tx, key, nonce string) error {
					_, err := tx.ExecContext(ctx, "INSERT INTO effects (k, nonce) VALUES (?, ?)", key, nonce)
					return err
				},
				Effects:    effects(lite.DB),
				Workers:    4,
				Intentions: 40,
				Timeout:    time.Minute,
			}
			if tc.broken != nil {
				tc.broken(l, lite.DB)
			}
			rec := &recorder{TB: t}
			l.Run(rec)
			got := strings.Join(rec.errs, "\n")
			switch {
			case tc.want == "" && got != "":
				t.Errorf("a sound run reported:\n%s", got)
			case tc.want != "" && !strings.Contains(got, tc.want):
				t.Errorf("reported %q, want an error containing %q", got, tc.want)
			}
		})
	}
}

// TestMeaning names the meanings of retryable errors.
func TestMeaning(t *testing.T) {
	for err, want := range map[error]string{
		fmt.Errorf("x: %w", idem.ErrCommitUnknown): "commit-unknown",
		idem.ErrUnavailable:                        "unavailable",
		errors.New("plain"):                        "other",
	} {
		if got := retryload.Meaning(err); got != want {
			t.Errorf("Meaning(%v) = %q, want %q", err, got, want)
		}
	}
}

// errMarked stands for a backend's error that a test counts apart.
var errMarked = errors.New("test: refused by a standby")

// TestMarksCountRetries: a retryable error that matches a Mark counts
// under the Mark's name when Do retried it on its own, and only for the
// load's calls: a probe's retry on another scope (as FirstCommit's, beside
// the fault) is not counted.
func TestMarksCountRetries(t *testing.T) {
	const intentions = 8
	lite := idemtest.NewSQLite(t, idem.Config{})
	if _, err := lite.DB.ExecContext(t.Context(), "CREATE TABLE effects (k TEXT NOT NULL, nonce TEXT NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	var (
		mu      sync.Mutex
		refused = map[string]bool{}
	)
	l := &retryload.Load[*sql.Tx]{
		Insert: func(ctx context.Context, tx *sql.Tx, key, nonce string) error {
			mu.Lock()
			first := !refused[key]
			refused[key] = true
			mu.Unlock()
			if first {
				return fmt.Errorf("%w: %w", idem.ErrUnavailable, errMarked)
			}
			_, err := tx.ExecContext(ctx, "INSERT INTO effects (k, nonce) VALUES (?, ?)", key, nonce)
			return err
		},
		Effects:    effects(lite.DB),
		Workers:    2,
		Intentions: intentions,
		Timeout:    time.Minute,
		Marks:      map[string]error{"standby": errMarked},
	}
	l.Fault = func(ctx context.Context) error {
		first := true
		_, err := l.Store.Do(ctx, idem.Request{Scope: "probe", Key: "p-1", Fingerprint: idem.FingerprintRequest("POST", "/probe", nil)},
			func(context.Context, *sql.Tx) (idem.Response, error) {
				if first {
					first = false
					return idem.Response{}, fmt.Errorf("%w: %w", idem.ErrUnavailable, errMarked)
				}
				return idem.Response{Status: 204}, nil
			})
		return err
	}
	store, err := idem.New(lite.Driver, idem.Config{Observer: l.Observer()})
	if err != nil {
		t.Fatal(err)
	}
	l.Store = store
	rep := l.Run(t)
	if rep.Retries["standby"] != intentions || rep.Retries["unavailable"] != 0 {
		t.Errorf("Retries %v; want %d under standby and none under unavailable", rep.Retries, intentions)
	}
}
