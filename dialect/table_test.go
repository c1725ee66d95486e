package dialect_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/idemkit/idem/dialect"
)

func TestNewTable(t *testing.T) {
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{"idempotency_keys", true},
		{"_t", true},
		{"T1", true},
		{strings.Repeat("a", dialect.MaxIdentifier), true},
		{"", false},
		{strings.Repeat("a", dialect.MaxIdentifier+1), false},
		{"1t", false},
		{"a-b", false},
		{"a b", false},
		{"a.b", false},
		{`a"b`, false},
		{"a`b", false},
		{"tä", false},
		{"a;drop", false},
	} {
		table, err := dialect.NewTable(tc.name)
		if tc.ok != (err == nil) {
			t.Errorf("NewTable(%q) = %v, want ok=%v", tc.name, err, tc.ok)
		}
		if err != nil && !errors.Is(err, dialect.ErrInvalidIdentifier) {
			t.Errorf("NewTable(%q) error %v does not match ErrInvalidIdentifier", tc.name, err)
		}
		if err == nil && (table.Name() != tc.name || table.Index("x") != tc.name+"_x") {
			t.Errorf("NewTable(%q): Name %q, Index %q", tc.name, table.Name(), table.Index("x"))
		}
	}
}

func TestClassified(t *testing.T) {
	cause := errors.New("driver said no")
	err := dialect.Classified(dialect.ErrDeadlock, cause)
	if !errors.Is(err, dialect.ErrDeadlock) || !errors.Is(err, cause) {
		t.Fatalf("Classified: %v does not match both the meaning and the cause", err)
	}
	if !dialect.IsClassified(err) || dialect.IsClassified(cause) {
		t.Fatal("IsClassified is wrong")
	}
	if dialect.Classified(dialect.ErrDeadlock, nil) != nil {
		t.Fatal("Classified(meaning, nil) is not nil")
	}
}
