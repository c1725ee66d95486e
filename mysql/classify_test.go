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
	d := NewDialect(0)
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
	d := NewDialect(1 << 20)
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
