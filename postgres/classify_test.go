package postgres

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemkit/idem/dialect"
)

func TestClassify(t *testing.T) {
	d := newDialect()
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
		{"25P02", dialect.ErrTxAborted},
		{"22021", dialect.ErrInvalidValue},
		{"54000", dialect.ErrTooLarge},
		// CockroachDB: "statement completion unknown" at COMMIT.
		{"40003", dialect.ErrCommitUnknown},
		// A session's prepared statements on another session's server
		// connection (a transaction-pooling proxy).
		{"42P05", ErrPreparedStatements},
		{"26000", ErrPreparedStatements},
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
	for _, code := range []string{"42P05", "26000"} {
		err := d.Classify(&pgconn.PgError{Code: code, Message: `prepared statement "stmtcache_1" does not exist`})
		if !errors.Is(err, dialect.ErrInvalidConfig) || !strings.Contains(err.Error(), "max_prepared_statements") ||
			!strings.Contains(err.Error(), "default_query_exec_mode=exec") || !strings.Contains(err.Error(), "stmtcache_1") {
			t.Errorf("SQLSTATE %s: %q, want ErrInvalidConfig, the server's message and what to set", code, err)
		}
	}
	other := &pgconn.PgError{Code: "23503"} // foreign key: no meaning of ours
	if err := d.Classify(other); err != error(other) || dialect.IsClassified(err) {
		t.Errorf("unmapped code: %v, want it unchanged", err)
	}
	if err := d.Classify(pgx.ErrTxClosed); !errors.Is(err, dialect.ErrTxDone) {
		t.Errorf("pgx.ErrTxClosed: %v, want ErrTxDone", err)
	}
	// A COMMIT the server answered with ROLLBACK: the transaction had
	// been aborted by a statement that failed.
	if err := d.Classify(fmt.Errorf("wrapped: %w", pgx.ErrTxCommitRollback)); !errors.Is(err, dialect.ErrTxAborted) || !errors.Is(err, pgx.ErrTxCommitRollback) {
		t.Errorf("pgx.ErrTxCommitRollback: %v, want ErrTxAborted wrapping it", err)
	}
	// A statement on a connection pgx closed when the server ended the
	// session: the transaction is gone, a retry of it may succeed.
	if err := d.Classify(fmt.Errorf("wrapped: %w", pgconn.ErrConnClosed)); !errors.Is(err, dialect.ErrUnavailable) {
		t.Errorf("pgconn.ErrConnClosed: %v, want ErrUnavailable", err)
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
		// pgx reports it for a pipeline whose connection broke after COMMIT
		// left, too (TestCommitOutcomeUnknown/answer-lost).
		{"connection closed", fmt.Errorf("wrapped: %w", pgconn.ErrConnClosed), true},
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

// TestSQLCommitError: through database/sql a FATAL at COMMIT may follow
// COMMIT's result, so its outcome is unknown; in any language.
func TestSQLCommitError(t *testing.T) {
	for _, tc := range []struct {
		name    string
		err     error
		unknown bool
	}{
		{"the session ended (shutdown)", &pgconn.PgError{Severity: "FATAL", SeverityUnlocalized: "FATAL", Code: "57P01"}, true},
		{"the session ended, severity localized", &pgconn.PgError{Severity: "SCHWERWIEGEND", SeverityUnlocalized: "FATAL", Code: "57P01"}, true},
		{"a server older than 9.6", &pgconn.PgError{Severity: "FATAL", Code: "57P01"}, true},
		{"a server error", &pgconn.PgError{Severity: "ERROR", SeverityUnlocalized: "ERROR", Code: "40001"}, false},
		{"rolled back at commit", pgx.ErrTxCommitRollback, false},
		{"connection lost after sending", io.ErrUnexpectedEOF, true},
	} {
		err := sqlCommitError(tc.err)
		if errors.Is(err, dialect.ErrCommitUnknown) != tc.unknown {
			t.Errorf("%s: %v, unknown=%v wanted", tc.name, err, tc.unknown)
		}
		if !errors.Is(err, tc.err) {
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

// The SQLSTATEs of failover and of the distributed PostgreSQL-compatible
// databases named in the README's "Clusters and distributed SQL", from any
// statement but COMMIT.
func TestClassifyClusterErrors(t *testing.T) {
	d := newDialect()
	for _, tc := range []struct {
		code   string
		server string
		want   error
	}{
		{"40001", "CockroachDB restart, YugabyteDB conflict, Aurora DSQL OC000/OC001", dialect.ErrSerialization},
		{"40003", "CockroachDB: result ambiguous", dialect.ErrCommitUnknown},
		{"40P01", "Citus or YugabyteDB distributed deadlock", dialect.ErrDeadlock},
		{"57P01", "a primary shutting down for failover, a CockroachDB node draining", dialect.ErrUnavailable},
		{"57P03", "a server starting up or in recovery", dialect.ErrUnavailable},
		{"08006", "connection failure", dialect.ErrUnavailable},
		{"25006", "a READ ONLY transaction, or a standby on a session idem cannot see", dialect.ErrReadOnly},
	} {
		pe := &pgconn.PgError{Code: tc.code}
		if err := d.Classify(fmt.Errorf("wrapped: %w", pe)); !errors.Is(err, tc.want) {
			t.Errorf("SQLSTATE %s (%s): %v, want %v", tc.code, tc.server, err, tc.want)
		}
	}
	// A 25006 on a session whose server said in_hot_standby=on before or
	// after the statement: not the primary, for now (standby.go).
	pe := &pgconn.PgError{Code: readOnlyTransaction, Message: "cannot execute INSERT in a read-only transaction"}
	err := d.Classify(fmt.Errorf("wrapped: %w", onStandby(nil, true, pe)))
	if !errors.Is(err, dialect.ErrUnavailable) || !errors.Is(err, ErrStandby) || errors.Is(err, dialect.ErrReadOnly) || !errors.Is(err, pe) ||
		!strings.Contains(err.Error(), "hot standby") {
		t.Errorf("a hot standby's 25006: %v, want ErrUnavailable and ErrStandby (not ErrReadOnly) naming the standby, wrapping the server error", err)
	}
	uv := &pgconn.PgError{Code: uniqueViolation}
	if err := onStandby(nil, true, uv); err != error(uv) {
		t.Errorf("another error on a standby: %v, want it unchanged", err)
	}
	if err := onStandby(nil, false, pe); err != error(pe) {
		t.Errorf("a 25006 on a session that never said it is a standby: %v, want it unchanged", err)
	}
	// Feature errors are not cured by a retry: Citus refusing a key without
	// the distribution column, Aurora DSQL or CockroachDB refusing a
	// statement (0A000), a column they lack (42703, ctid in purge).
	for _, code := range []string{"0A000", "42703"} {
		if err := d.Classify(&pgconn.PgError{Code: code}); dialect.IsClassified(err) {
			t.Errorf("SQLSTATE %s: %v, want it unclassified", code, err)
		}
	}
}

// At COMMIT a serialization failure (CockroachDB, YugabyteDB, Aurora DSQL
// adjudicate there) is a known rollback that Do retries; CockroachDB's
// ambiguous result is an unknown outcome.
func TestCommitErrorClusters(t *testing.T) {
	d := newDialect()
	for code, want := range map[string]error{"40001": dialect.ErrSerialization, "40P01": dialect.ErrDeadlock, "40003": dialect.ErrCommitUnknown} {
		pe := &pgconn.PgError{Code: code}
		err := d.Classify(commitError(pe))
		if !errors.Is(err, want) || !errors.Is(err, pe) {
			t.Errorf("COMMIT failing with %s: %v, want %v wrapping the server error", code, err, want)
		}
		if code != "40003" && errors.Is(err, dialect.ErrCommitUnknown) {
			t.Errorf("COMMIT failing with %s is a known rollback, not an unknown outcome: %v", code, err)
		}
	}
}
