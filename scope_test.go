package idem_test

import (
	"strings"
	"testing"

	"github.com/idemkit/idem"
)

// TestScope: scopes begin with the quoted principal, so ScopePrefix selects
// them; long ones are hashed, keeping the principal when it fits; every
// form is a valid scope; different pairs never build the same scope.
func TestScope(t *testing.T) {
	long := strings.Repeat("r", 300)
	tests := []struct {
		name, principal, operation string
		want                       string // "" when hashed
		selected                   bool   // ScopePrefix(principal) selects it
	}{
		{"plain", "tenant-42", `POST "/orders"`, `"tenant-42" POST "/orders"`, true},
		{"quotes and spaces", `a "b" c`, `POST "/x"`, `"a \"b\" c" POST "/x"`, true},
		{"empty principal", "", `POST "/x"`, `"" POST "/x"`, true},
		{"long operation keeps the principal", "tenant-42", `POST "` + long + `"`, "", true},
		{"long principal", long, `POST "/x"`, "", false},
	}
	seen := map[string]string{}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := idem.Scope(tc.principal, tc.operation)
			if tc.want != "" && s != tc.want {
				t.Errorf("Scope = %q, want %q", s, tc.want)
			}
			if tc.want == "" && !strings.Contains(s, "sha256:") {
				t.Errorf("Scope = %q, want a hashed form", s)
			}
			if got := strings.HasPrefix(s, idem.ScopePrefix(tc.principal)); got != tc.selected {
				t.Errorf("ScopePrefix(principal) selects %q: %v, want %v", s, got, tc.selected)
			}
			if err := (idem.Request{Scope: s, Key: "k"}).Validate(); err != nil {
				t.Errorf("Scope = %q is not valid: %v", s, err)
			}
			if other, dup := seen[s]; dup {
				t.Errorf("Scope = %q, also built by %s", s, other)
			}
			seen[s] = tc.name
		})
	}
	// A principal that is a prefix of another does not select it.
	if strings.HasPrefix(idem.Scope("tenant-420", `POST "/x"`), idem.ScopePrefix("tenant-42")) {
		t.Error(`ScopePrefix("tenant-42") selects tenant-420's scope`)
	}
	// The framing is unambiguous: moving a space between the parts changes the scope.
	if idem.Scope("a b", "c") == idem.Scope("a", "b c") {
		t.Error(`Scope("a b", "c") == Scope("a", "b c")`)
	}
}
