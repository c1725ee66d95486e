package postgres

import (
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemkit/idem/dialect"
)

func TestClassify(t *testing.T) {
	d := NewDialect()
	for _, tc := range []struct {
		code string
		want error
	}{
		{"23505", dialect.ErrUniqueViolation},
		{"40001", dialect.ErrSerialization},
		{"40P01", dialect.ErrDeadlock},
		{"55P03", dialect.ErrLockTimeout},
		{"57014", dialect.ErrLockTimeout},
		{"25006", dialect.ErrReadOnly},
		{"25P02", dialect.ErrBadTx},
		{"22021", dialect.ErrInvalidValue},
		{"54000", dialect.ErrTooLarge},
		// CockroachDB: "statement completion unknown" at COMMIT.
		{"40003", dialect.ErrCommitUnknown},
	} {
		pe := &pgconn.PgError{Code: tc.code, Message: "message text is never read"}
		err := d.Classify(fmt.Errorf("wrapped: %w", pe))
		if !errors.Is(err, tc.want) {
			t.Errorf("SQLSTATE %s: %v, want %v", tc.code, err, tc.want)
		}
		var got *pgconn.PgError
		if !errors.As(err, &got) || got != pe {
			t.Errorf("SQLSTATE %s: the *pgconn.PgError is lost", tc.code)
		}
	}
	other := &pgconn.PgError{Code: "23503"} // foreign key: no meaning of ours
	if err := d.Classify(other); err != error(other) || dialect.IsClassified(err) {
		t.Errorf("unmapped code: %v, want it unchanged", err)
	}
	if err := d.Classify(pgx.ErrTxClosed); !errors.Is(err, dialect.ErrTxDone) {
		t.Errorf("pgx.ErrTxClosed: %v, want ErrTxDone", err)
	}
	if d.Classify(nil) != nil {
		t.Error("Classify(nil) is not nil")
	}
}

func TestCommitError(t *testing.T) {
	for _, tc := range []struct {
		name    string
		err     error
		unknown bool
	}{
		{"server error", &pgconn.PgError{Code: "40001"}, false},
		{"rolled back at commit", pgx.ErrTxCommitRollback, false},
		{"CockroachDB statement completion unknown", &pgconn.PgError{Code: "40003"}, true},
		{"connection lost after sending", io.ErrUnexpectedEOF, true},
		{"nil", nil, false},
	} {
		err := commitError(tc.err)
		if errors.Is(err, dialect.ErrCommitUnknown) != tc.unknown {
			t.Errorf("%s: %v, unknown=%v wanted", tc.name, err, tc.unknown)
		}
		if tc.err != nil && !errors.Is(err, tc.err) {
			t.Errorf("%s: the original error is lost: %v", tc.name, err)
		}
	}
}

func TestLockTimeout(t *testing.T) {
	for in, want := range map[int64]string{0: "1ms", 1: "1ms", 500: "500ms", 5000: "5000ms"} {
		if got := lockTimeout(timeMillis(in)); got != want {
			t.Errorf("lockTimeout(%dms) = %q, want %q (0 would mean wait forever)", in, got, want)
		}
	}
}

func timeMillis(ms int64) time.Duration { return time.Duration(ms) * time.Millisecond }
