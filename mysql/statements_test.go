package mysql

import (
	"strings"
	"testing"

	"github.com/idemkit/idem/dialect"
)

// On MariaDB each of the claim's statements carries its lock wait bound
// and, where the server has innodb_snapshot_isolation, turns it off, so a
// loser reads the latest committed record whatever its snapshot.
func TestBoundedClaimStatements(t *testing.T) {
	table, _ := dialect.NewTable("t")
	for _, tc := range []struct {
		latest bool
		prefix string
	}{
		{false, "SET STATEMENT innodb_lock_wait_timeout=5 FOR "},
		{true, "SET STATEMENT innodb_lock_wait_timeout=5, innodb_snapshot_isolation=OFF FOR "},
	} {
		d := newDialect(0)
		d.latestLockedReads = tc.latest
		c := d.bounded(table, d.stmts.For(table), 5)
		for name, stmt := range map[string]string{"insert": c.insert, "locking read": c.lockingRead, "takeover": c.takeover} {
			if !strings.HasPrefix(stmt, tc.prefix) {
				t.Errorf("latestLockedReads=%v: %s %q, want prefix %q", tc.latest, name, stmt, tc.prefix)
			}
		}
	}
}

// On Galera lookups are causal reads; elsewhere plain ones.
func TestCausalLookupStatement(t *testing.T) {
	table, _ := dialect.NewTable("t")
	s := newDialect(0).stmts.For(table)
	if s.causalRead != causalPrefix+s.read || strings.HasPrefix(s.read, "SET") {
		t.Errorf("read %q, causal read %q", s.read, s.causalRead)
	}
}

func TestGaleraNode(t *testing.T) {
	for _, tc := range []struct {
		vars map[string]string
		want bool
	}{
		{map[string]string{}, false}, // MySQL: neither variable
		{map[string]string{"wsrep_on": "OFF", "wsrep_provider": "none"}, false},
		{map[string]string{"wsrep_on": "ON", "wsrep_provider": "none"}, false},
		{map[string]string{"wsrep_on": "ON", "wsrep_provider": "/usr/lib/galera/libgalera_smm.so"}, true},
	} {
		if got := galeraNode(tc.vars); got != tc.want {
			t.Errorf("galeraNode(%v) = %v, want %v", tc.vars, got, tc.want)
		}
	}
}
