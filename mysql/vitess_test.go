package mysql

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"

	mysqldriver "github.com/go-sql-driver/mysql"

	"github.com/idemkit/idem/dialect"
)

// vtgate's own errors map by number and, for 1317, by the refusal's text;
// elsewhere those numbers keep MySQL's meaning (none).
func TestClassifyVitess(t *testing.T) {
	vtgate := newDialect(0)
	vtgate.vitess = true
	for _, tc := range []struct {
		number  uint16
		message string
		want    []error
		notWant []error
	}{
		{1317, `multi-db transaction attempted: [target:{keyspace:"idem" shard:"-80"}]`, []error{dialect.ErrTxAborted, ErrCrossShard}, []error{dialect.ErrSerialization}},
		{1317, "transaction 1796: ended at 2026-12-04 05:00:00.000 UTC (exceeded timeout: 30s)", []error{dialect.ErrSerialization}, []error{ErrCrossShard, dialect.ErrTxAborted}},
		{1317, "target: idem.-80.primary: vttablet: rpc error: code = DeadlineExceeded desc = context deadline exceeded", []error{dialect.ErrLockTimeout}, []error{dialect.ErrSerialization, ErrCrossShard}},
		{1203, "transaction pool connection limit exceeded", []error{dialect.ErrUnavailable}, nil},
		{3024, "Query execution was interrupted, maximum statement execution time exceeded", []error{dialect.ErrLockTimeout}, nil},
		{1062, "Duplicate entry", []error{dialect.ErrUniqueViolation}, nil},
	} {
		me := &mysqldriver.MySQLError{Number: tc.number, Message: tc.message}
		err := vtgate.Classify(fmt.Errorf("wrapped: %w", me))
		for _, want := range tc.want {
			if !errors.Is(err, want) {
				t.Errorf("vtgate's %d %q: %v, want %v", tc.number, tc.message, err, want)
			}
		}
		for _, not := range tc.notWant {
			if errors.Is(err, not) {
				t.Errorf("vtgate's %d %q: %v, must not match %v", tc.number, tc.message, err, not)
			}
		}
		var got *mysqldriver.MySQLError
		if !errors.As(err, &got) || got != me {
			t.Errorf("vtgate's %d: the *mysql.MySQLError is lost", tc.number)
		}
		if tc.number != 1062 && dialect.IsClassified(newDialect(0).Classify(me)) {
			t.Errorf("%d on MySQL itself: classified, want it left as it is", tc.number)
		}
	}
}

func TestVitessOptions(t *testing.T) {
	for _, tc := range []struct {
		in      VitessOptions
		want    VitessOptions
		invalid bool
	}{
		{VitessOptions{}, VitessOptions{ShardBy: "scope", Vindex: "xxhash"}, false},
		{VitessOptions{ShardBy: "idem_key", Vindex: "tenant_hash"}, VitessOptions{ShardBy: "idem_key", Vindex: "tenant_hash"}, false},
		{VitessOptions{ShardBy: "tenant"}, VitessOptions{}, true},
		{VitessOptions{Vindex: "x`y"}, VitessOptions{}, true},
		{VitessOptions{Vindex: "1x"}, VitessOptions{}, true},
	} {
		got, err := tc.in.withDefaults()
		if tc.invalid {
			if !errors.Is(err, dialect.ErrInvalidConfig) {
				t.Errorf("%+v: %v, want ErrInvalidConfig", tc.in, err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("%+v: %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
	}
}

func TestIsVitess(t *testing.T) {
	for v, want := range map[string]bool{
		"8.4.6-Vitess": true, "8.0.31-vitess": true, "9.7.4-2": false, "11.8.3-MariaDB-0+deb13u1": false, "8.0.36": false,
	} {
		if got := isVitess(v); got != want {
			t.Errorf("isVitess(%q) = %v, want %v", v, got, want)
		}
	}
}

// A VSchema change refused because another changed it meanwhile is tried
// again; other errors are not.
func TestStaleVSchema(t *testing.T) {
	stale := &mysqldriver.MySQLError{Number: 1105, Message: "failed to update vschema as the session's version was stale; please try again"}
	if !staleVSchema(fmt.Errorf("route: %w", stale)) {
		t.Error("the stale-VSchema refusal is not recognised")
	}
	for _, err := range []error{
		&mysqldriver.MySQLError{Number: 1105, Message: "table t not found"},
		&mysqldriver.MySQLError{Number: 1815, Message: "vindex xxhash already defined on table t"},
		errors.New("version was stale"),
	} {
		if staleVSchema(err) {
			t.Errorf("%v taken for the stale-VSchema refusal", err)
		}
	}
}

// Behind vtgate any server error from COMMIT leaves the outcome unknown,
// but the refusal of a second shard, which vtgate makes before it commits.
func TestVitessCommitError(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want error
	}{
		{&mysqldriver.MySQLError{Number: 1317, Message: "vttablet: rpc error: code = Canceled desc = context canceled"}, dialect.ErrCommitUnknown},
		{&mysqldriver.MySQLError{Number: 3024, Message: "Query execution was interrupted, maximum statement execution time exceeded"}, dialect.ErrCommitUnknown},
		{&mysqldriver.MySQLError{Number: 1213, Message: "Deadlock found"}, dialect.ErrCommitUnknown},
		{&mysqldriver.MySQLError{Number: 1317, Message: "multi-db transaction attempted: [...]"}, ErrCrossShard},
		{mysqldriver.ErrInvalidConn, dialect.ErrCommitUnknown},
	} {
		if got := vitessCommitError(tc.err); !errors.Is(got, tc.want) || !errors.Is(got, tc.err) {
			t.Errorf("COMMIT failed with %v: %v, want %v wrapping it", tc.err, got, tc.want)
		}
	}
}

// vtgateServes's probe names every column the migrations create, so that
// Migrate waits for vtgate to learn the last one added.
func TestSettleProbeNamesEveryColumn(t *testing.T) {
	table, _ := dialect.NewTable("t")
	var ddl strings.Builder
	for _, m := range newDialect(0).Schema(table).Migrations {
		for _, stmt := range m.Statements {
			// The record table's, not the fence's.
			if strings.Contains(stmt, "TABLE IF NOT EXISTS `t`") || strings.Contains(stmt, "ALTER TABLE `t`") {
				ddl.WriteString(stmt + "\n")
			}
		}
	}
	probe := &recordingQueryer{}
	if err := vtgateServes(table)(context.Background(), probe); err != nil {
		t.Fatal(err)
	}
	column := regexp.MustCompile(`(?m)^\s+(?:ADD COLUMN )?([a-z_]+)\s+(?:VARBINARY|BINARY|SMALLINT|MEDIUMBLOB|LONGBLOB|DATETIME|BIGINT)`)
	found := 0
	for _, m := range column.FindAllStringSubmatch(ddl.String(), -1) {
		if !strings.Contains(probe.sql, m[1]) {
			t.Errorf("column %s of the migrations is not in the probe %q", m[1], probe.sql)
		}
		found++
	}
	if found < 12 {
		t.Fatalf("found %d columns in the migrations, want the record table's 12: the pattern is broken", found)
	}
}

// recordingQueryer answers every statement with nothing, keeping the last.
type recordingQueryer struct{ sql string }

func (r *recordingQueryer) Exec(_ context.Context, query string, _ ...any) (int64, error) {
	r.sql = query
	return 0, nil
}

func (r *recordingQueryer) Query(context.Context, string, ...any) (dialect.Rows, error) {
	return nil, errors.New("not scripted")
}
