package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// events is go test -json of two packages: one with a pass, an allowed skip
// and a skip nobody allowed, one with a failure; and a package without tests.
const events = `{"Action":"start","Package":"example.com/a"}
{"Action":"run","Package":"example.com/a","Test":"TestOK"}
{"Action":"output","Package":"example.com/a","Test":"TestOK","Output":"=== RUN   TestOK\n"}
{"Action":"pass","Package":"example.com/a","Test":"TestOK","Elapsed":0.01}
{"Action":"run","Package":"example.com/a","Test":"TestSuite/NoRowLocks"}
{"Action":"output","Package":"example.com/a","Test":"TestSuite/NoRowLocks","Output":"    suite.go:79: writers wait on the whole database\n"}
{"Action":"output","Package":"example.com/a","Test":"TestSuite/NoRowLocks","Output":"--- SKIP: TestSuite/NoRowLocks (0.00s)\n"}
{"Action":"skip","Package":"example.com/a","Test":"TestSuite/NoRowLocks","Elapsed":0}
{"Action":"output","Package":"example.com/a","Test":"TestForgotten","Output":"    x_test.go:9: no server\n"}
{"Action":"skip","Package":"example.com/a","Test":"TestForgotten","Elapsed":0}
{"Action":"output","Package":"example.com/a","Output":"ok  \texample.com/a\t0.1s\n"}
{"Action":"pass","Package":"example.com/a","Elapsed":0.1}
{"Action":"output","Package":"example.com/b","Test":"TestBroken","Output":"    b_test.go:3: effects = 2, want 1\n"}
{"Action":"fail","Package":"example.com/b","Test":"TestBroken","Elapsed":0.2}
{"Action":"fail","Package":"example.com/b","Elapsed":0.3}
{"Action":"output","Package":"example.com/c","Output":"?   \texample.com/c\t[no test files]\n"}
{"Action":"skip","Package":"example.com/c","Elapsed":0}
`

func TestSummarize(t *testing.T) {
	skips := filepath.Join(t.TempDir(), "skips")
	if err := os.WriteFile(skips, []byte("# allowed\nexample.com/a  TestSuite/No.*  no row locks on this database\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	allow, err := readSkips(skips)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		input  string
		allow  []*allowed
		path   string
		code   int
		wants  []string
		absent []string
	}{
		{"with the skip list", events, allow, skips, 1, []string{
			"ok    example.com/a", "  1 passed,   2 skipped,   0 failed",
			"FAIL  example.com/b", "  0 passed,   0 skipped,   1 failed",
			"--- FAIL: TestBroken (example.com/b)", "effects = 2, want 1",
			"allowed     example.com/a TestSuite/NoRowLocks", "writers wait on the whole database",
			"NOT ALLOWED example.com/a TestForgotten", "no server",
			"\n1 passed, 1 failed, 2 skipped\n",
		}, []string{"example.com/c"}},
		{"no test ran", `{"Action":"skip","Package":"example.com/c"}` + "\n", nil, "", 1, []string{"no test ran", "0 passed, 0 failed, 0 skipped"}, nil},
		{"all passed, skips allowed without a list", strings.Join(strings.Split(events, "\n")[:12], "\n") + "\n", nil, "", 0, []string{"1 passed, 0 failed, 2 skipped"}, []string{"NOT ALLOWED"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out strings.Builder
			code, err := summarize(strings.NewReader(tc.input), &out, tc.allow, tc.path)
			if err != nil {
				t.Fatal(err)
			}
			if code != tc.code {
				t.Errorf("exit code %d, want %d\n%s", code, tc.code, out.String())
			}
			for _, want := range tc.wants {
				if !strings.Contains(out.String(), want) {
					t.Errorf("output lacks %q:\n%s", want, out.String())
				}
			}
			for _, absent := range tc.absent {
				if strings.Contains(out.String(), absent) {
					t.Errorf("output has %q:\n%s", absent, out.String())
				}
			}
		})
	}
	if _, err := readSkips(writeFile(t, "example.com/a TestX\n")); err == nil {
		t.Error("a skip without a reason was accepted")
	}
}

func writeFile(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
