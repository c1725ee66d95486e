package mysql

import (
	"database/sql/driver"
	"errors"
	"fmt"
	"testing"
	"time"

	mysqldriver "github.com/go-sql-driver/mysql"

	"github.com/idemkit/idem/dialect"
)

func TestClassify(t *testing.T) {
	d := newDialect(0)
	for _, tc := range []struct {
		number uint16
		want   error
	}{
		{1062, dialect.ErrUniqueViolation},
		{1213, dialect.ErrDeadlock},
		{1205, dialect.ErrLockTimeout},
		{3572, dialect.ErrLockTimeout},
		{1020, dialect.ErrSerialization},
		{1792, dialect.ErrReadOnly},
		{1290, dialect.ErrReadOnly},
		{1153, dialect.ErrTooLarge},
		{1406, dialect.ErrTooLarge},
		{1210, dialect.ErrTooLarge},
		{1366, dialect.ErrInvalidValue},
	} {
		me := &mysqldriver.MySQLError{Number: tc.number, Message: "message text is never read"}
		err := d.Classify(fmt.Errorf("wrapped: %w", me))
		if !errors.Is(err, tc.want) {
			t.Errorf("error %d: %v, want %v", tc.number, err, tc.want)
		}
		var got *mysqldriver.MySQLError
		if !errors.As(err, &got) || got != me {
			t.Errorf("error %d: the *mysql.MySQLError is lost", tc.number)
		}
	}
	if err := d.Classify(mysqldriver.ErrPktTooLarge); !errors.Is(err, dialect.ErrTooLarge) {
		t.Errorf("ErrPktTooLarge: %v, want ErrTooLarge", err)
	}
	other := &mysqldriver.MySQLError{Number: 1452} // foreign key
	if err := d.Classify(other); err != error(other) {
		t.Errorf("unmapped number: %v, want it unchanged", err)
	}
}

func TestCommitError(t *testing.T) {
	for _, tc := range []struct {
		name    string
		err     error
		unknown bool
	}{
		{"server error", &mysqldriver.MySQLError{Number: 1213}, false},
		{"nothing sent", driver.ErrBadConn, false},
		{"connection broke after sending", mysqldriver.ErrInvalidConn, true},
		{"nil", nil, false},
	} {
		if got := errors.Is(commitError(tc.err), dialect.ErrCommitUnknown); got != tc.unknown {
			t.Errorf("%s: unknown=%v, want %v", tc.name, got, tc.unknown)
		}
	}
}

func TestLockWaitSeconds(t *testing.T) {
	for in, want := range map[time.Duration]int64{0: 1, time.Millisecond: 1, time.Second: 1, 1001 * time.Millisecond: 2, 5 * time.Second: 5} {
		if got := lockWaitSeconds(in); got != want {
			t.Errorf("lockWaitSeconds(%v) = %d, want %d", in, got, want)
		}
	}
}

func TestCompleteRefusesBodyOverPacket(t *testing.T) {
	d := newDialect(1 << 20)
	table, _ := dialect.NewTable("t")
	err := d.Complete(t.Context(), nil, table, dialect.CompleteArgs{Body: make([]byte, 1<<20)})
	if !errors.Is(err, dialect.ErrTooLarge) {
		t.Fatalf("Complete with a body of max_allowed_packet: %v, want ErrTooLarge before anything is sent", err)
	}
}

func TestParseVersion(t *testing.T) {
	for in, want := range map[string][3]int{
		"8.4.3":                     {8, 4, 3},
		"10.11.6-MariaDB-0+deb12u1": {10, 11, 6},
		"8.0.1-log":                 {8, 0, 1},
	} {
		a, b, c := parseVersion(in)
		if [3]int{a, b, c} != want {
			t.Errorf("parseVersion(%q) = %v, want %v", in, [3]int{a, b, c}, want)
		}
	}
	if versionAtLeast([3]int{10, 5, 9}, [3]int{10, 6, 0}) || !versionAtLeast([3]int{8, 0, 1}, [3]int{8, 0, 1}) {
		t.Error("versionAtLeast is wrong")
	}
}

// The error numbers of clustered and distributed servers named in the
// README's "Clusters and distributed SQL", each with its meaning, from any
// statement but COMMIT.
func TestClassifyClusterErrors(t *testing.T) {
	d := newDialect(0)
	for _, tc := range []struct {
		number uint16
		server string
		want   error
	}{
		{1213, "Galera: certification failure or brute-force abort", dialect.ErrDeadlock},
		{1047, "Galera: node not in the primary component; Vitess: no such session", dialect.ErrUnavailable},
		{1180, "Galera: write set not replicated", dialect.ErrUnavailable},
		{3101, "MySQL Group Replication: rolled back at COMMIT", dialect.ErrSerialization},
		{4031, "MySQL: idle connection closed by the server", dialect.ErrUnavailable},
		{2003, "MySQL Router: no destination answers", dialect.ErrUnavailable},
		{1205, "TiDB pessimistic lock wait", dialect.ErrLockTimeout},
		{8002, "TiDB: SELECT FOR UPDATE write conflict", dialect.ErrSerialization},
		{8005, "TiDB: write conflict", dialect.ErrSerialization},
		{8022, "TiDB: commit failed, rolled back", dialect.ErrSerialization},
		{8028, "TiDB: schema changed before COMMIT", dialect.ErrSerialization},
		{9007, "TiDB: write conflict in TiKV", dialect.ErrSerialization},
		{9001, "TiDB: PD timeout", dialect.ErrUnavailable},
		{9002, "TiDB: TiKV timeout", dialect.ErrUnavailable},
		{9003, "TiDB: TiKV busy", dialect.ErrUnavailable},
		{9005, "TiDB: region unavailable", dialect.ErrUnavailable},
		{1290, "a read-only server (read_only, super_read_only)", dialect.ErrReadOnly},
	} {
		me := &mysqldriver.MySQLError{Number: tc.number}
		if err := d.Classify(fmt.Errorf("wrapped: %w", me)); !errors.Is(err, tc.want) {
			t.Errorf("error %d (%s): %v, want %v", tc.number, tc.server, err, tc.want)
		}
	}
	// On a Group Replication member, read-only is a secondary, or a new
	// primary still in its election: another member, or this one in a
	// moment, takes the write. 1792 (a READ ONLY transaction) stays
	// read-only.
	member := newDialect(0)
	member.groupMember = true
	for n, want := range map[uint16]error{1290: dialect.ErrUnavailable, 1792: dialect.ErrReadOnly, 3101: dialect.ErrSerialization} {
		if err := member.Classify(&mysqldriver.MySQLError{Number: n}); !errors.Is(err, want) {
			t.Errorf("error %d on a Group Replication member: %v, want %v", n, err, want)
		}
	}
	// Numbers that carry no meaning idem could act on stay unclassified:
	// Vitess reports vtgate and vttablet failures as 1105 and 1317 with
	// the cause only in the text; TiDB 9006 (GC life time) is not cured by
	// a retry.
	for _, n := range []uint16{1105, 1317, 9006} {
		me := &mysqldriver.MySQLError{Number: n}
		if err := d.Classify(me); dialect.IsClassified(err) {
			t.Errorf("error %d: %v, want it unclassified", n, err)
		}
	}
}

// At COMMIT some server errors mean an unknown outcome or a retryable
// rollback rather than what they mean elsewhere.
func TestCommitErrorClusters(t *testing.T) {
	for _, tc := range []struct {
		name   string
		number uint16
		want   error // nil: returned as is, then classified as usual
	}{
		{"Galera certification failure: rolled back everywhere", 1213, nil},
		{"Galera node left the primary component while replicating", 1180, dialect.ErrCommitUnknown},
		{"TiDB optimistic uniqueness check at COMMIT", 1062, dialect.ErrSerialization},
		{"Galera node not ready: nothing was replicated", 1047, nil},
		{"Group Replication member lost its majority waiting for certification", 3100, dialect.ErrCommitUnknown},
		{"MySQL Router lost the server during the COMMIT it relayed", 2013, dialect.ErrCommitUnknown},
		{"a proxy that could not reach any server", 2003, dialect.ErrCommitUnknown},
	} {
		me := &mysqldriver.MySQLError{Number: tc.number}
		err := commitError(me)
		switch {
		case tc.want == nil && err != error(me):
			t.Errorf("%s (%d): %v, want the server error unchanged", tc.name, tc.number, err)
		case tc.want != nil && !errors.Is(err, tc.want):
			t.Errorf("%s (%d): %v, want %v", tc.name, tc.number, err, tc.want)
		}
		if !errors.Is(err, me) {
			t.Errorf("%s: the server error is lost: %v", tc.name, err)
		}
	}
	// 1180 naming the engine's lock deadlock (149): rolled back, retried.
	rolledBack := &mysqldriver.MySQLError{Number: 1180, Message: "Got error 149 - 'Lock deadlock; Retry transaction' during COMMIT"}
	if err := commitError(rolledBack); !errors.Is(err, dialect.ErrDeadlock) || errors.Is(err, dialect.ErrCommitUnknown) {
		t.Errorf("1180 with error 149 at COMMIT: %v, want ErrDeadlock, not an unknown outcome", err)
	}
	// Through Classify, as Do sees it: each is retried or reported as unknown.
	d := newDialect(0)
	for n, want := range map[uint16]error{1213: dialect.ErrDeadlock, 1047: dialect.ErrUnavailable, 1062: dialect.ErrSerialization, 1180: dialect.ErrCommitUnknown, 3100: dialect.ErrCommitUnknown, 3101: dialect.ErrSerialization} {
		if err := d.Classify(commitError(&mysqldriver.MySQLError{Number: n})); !errors.Is(err, want) {
			t.Errorf("COMMIT failing with %d, classified: %v, want %v", n, err, want)
		}
	}
}

// On Galera a lookup's 1205 is the causal wait giving up, not a lock: the
// node cannot answer, another may.
func TestCausalReadError(t *testing.T) {
	me := &mysqldriver.MySQLError{Number: 1205}
	if err := causalReadError(me); !errors.Is(err, dialect.ErrUnavailable) || !errors.Is(err, me) {
		t.Errorf("1205 from a causal lookup: %v, want ErrUnavailable wrapping it", err)
	}
	other := &mysqldriver.MySQLError{Number: 1047}
	if err := causalReadError(other); err != error(other) {
		t.Errorf("1047 from a causal lookup: %v, want it unchanged (Classify maps it)", err)
	}
	if causalReadError(nil) != nil {
		t.Error("causalReadError(nil) is not nil")
	}
}
