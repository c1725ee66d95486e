// Command testsummary reads the output of go test -json on its standard
// input and says what the tests did, so that a skipped test no longer looks
// like a passing one: a line per package with its passed, skipped and
// failed tests, the output of every failed test and of every package that
// did not build, every skipped test with its reason, and a closing line
// "N passed, N failed, N skipped".
//
// With -skips FILE, a test that skipped without being allowed there is a
// failure too. The file lists the allowed skips, one a line: the package's
// import path, a regular expression for the test's full name (matched
// whole), and the reason, which is required:
//
//	github.com/idemkit/idem/sqlite  TestConformance/DeadlockRetried  SQLite has no row locks to deadlock on
//
// It exits 1 when a test or a package failed, a skip was not allowed, or
// the input held no test at all; 2 when it cannot read its input.
//
//	go test -json ./... | go run ./scripts/testsummary -skips .ci/skips
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strings"
)

// event is one line of go test -json (see go doc test2json).
type event struct {
	Action     string
	Package    string
	Test       string
	Elapsed    float64
	Output     string
	ImportPath string // build-output and build-fail
}

// allowed is one line of the skip list.
type allowed struct {
	pkg    string
	test   *regexp.Regexp
	reason string
}

// pkgResult counts one package's tests.
type pkgResult struct {
	pass, skip, fail int
}

// skipped is a test that skipped, with its reason.
type skipped struct {
	pkg, test, reason string
	allowed           *allowed
}

func main() {
	skipsPath := flag.String("skips", "", "the file of allowed skips; without it every skip is allowed")
	flag.Parse()
	var allow []*allowed
	if *skipsPath != "" {
		var err error
		if allow, err = readSkips(*skipsPath); err != nil {
			fmt.Fprintln(os.Stderr, "testsummary:", err)
			os.Exit(2)
		}
	}
	code, err := summarize(os.Stdin, os.Stdout, allow, *skipsPath)
	if err != nil {
		fmt.Fprintln(os.Stderr, "testsummary:", err)
		os.Exit(2)
	}
	os.Exit(code)
}

// summarize reads the events from in and writes the summary to out. It
// returns the exit code.
func summarize(in io.Reader, out io.Writer, allow []*allowed, skipsPath string) (int, error) {
	var (
		pkgs        = map[string]*pkgResult{}
		order       []string
		outputs     = map[string][]string{} // package + "\x00" + test -> its output so far
		skips       []skipped
		failedPkgs  []string
		total       pkgResult
		buildOutput = map[string][]string{}
	)
	result := func(pkg string) *pkgResult {
		r, ok := pkgs[pkg]
		if !ok {
			r = &pkgResult{}
			pkgs[pkg] = r
			order = append(order, pkg)
		}
		return r
	}
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		line := sc.Bytes()
		var e event
		if err := json.Unmarshal(line, &e); err != nil || e.Action == "" {
			// Not an event (go test's own messages): pass it on.
			fmt.Fprintln(out, string(line))
			continue
		}
		id := e.Package + "\x00" + e.Test
		switch e.Action {
		case "build-output":
			buildOutput[e.ImportPath] = append(buildOutput[e.ImportPath], e.Output)
		case "build-fail":
			fmt.Fprintf(out, "BUILD FAILED %s\n%s", e.ImportPath, strings.Join(buildOutput[e.ImportPath], ""))
		case "output":
			outputs[id] = append(outputs[id], e.Output)
		case "pass", "fail", "skip":
			lines := outputs[id]
			delete(outputs, id)
			if e.Test == "" {
				r := result(e.Package)
				switch e.Action {
				case "fail":
					failedPkgs = append(failedPkgs, e.Package)
					fmt.Fprintf(out, "FAIL  %-52s %3d passed, %3d skipped, %3d failed  %6.1fs\n", e.Package, r.pass, r.skip, r.fail, e.Elapsed)
					if r.fail == 0 {
						// Failed outside any test (a build error, a
						// panic in TestMain, a timeout): show why.
						fmt.Fprint(out, indent(lines))
					}
				case "pass":
					fmt.Fprintf(out, "ok    %-52s %3d passed, %3d skipped, %3d failed  %6.1fs\n", e.Package, r.pass, r.skip, r.fail, e.Elapsed)
				case "skip":
					delete(pkgs, e.Package) // no test files
					order = slices.DeleteFunc(order, func(p string) bool { return p == e.Package })
				}
				continue
			}
			r := result(e.Package)
			switch e.Action {
			case "pass":
				r.pass++
				total.pass++
			case "fail":
				r.fail++
				total.fail++
				fmt.Fprintf(out, "--- FAIL: %s (%s)\n%s", e.Test, e.Package, indent(lines))
			case "skip":
				r.skip++
				total.skip++
				s := skipped{pkg: e.Package, test: e.Test, reason: skipReason(lines)}
				for _, a := range allow {
					if a.pkg == e.Package && a.test.MatchString(e.Test) {
						s.allowed = a
						break
					}
				}
				skips = append(skips, s)
			}
		}
	}
	if err := sc.Err(); err != nil {
		return 2, err
	}

	code := 0
	if len(skips) > 0 {
		fmt.Fprintf(out, "\nskipped tests (%d):\n", len(skips))
		for _, s := range skips {
			mark := "allowed"
			if skipsPath != "" && s.allowed == nil {
				mark = "NOT ALLOWED"
				code = 1
			}
			fmt.Fprintf(out, "  %-11s %s %s\n              %s\n", mark, s.pkg, s.test, s.reason)
		}
		if code != 0 {
			fmt.Fprintf(out, "a test skipped that %s does not allow: make it run, or add it there with the reason\n", skipsPath)
		}
	}
	if len(failedPkgs) > 0 || total.fail > 0 {
		code = 1
	}
	if total.pass+total.fail+total.skip == 0 {
		fmt.Fprintln(out, "no test ran")
		code = 1
	}
	fmt.Fprintf(out, "\n%d passed, %d failed, %d skipped\n", total.pass, total.fail, total.skip)
	return code, nil
}

// skipReason is what a skipped test logged, without the framework's lines.
func skipReason(lines []string) string {
	var kept []string
	for _, l := range lines {
		t := strings.TrimSpace(l)
		if t == "" || strings.HasPrefix(t, "=== ") || strings.HasPrefix(t, "--- ") {
			continue
		}
		kept = append(kept, t)
	}
	if len(kept) == 0 {
		return "(no reason given)"
	}
	return strings.Join(kept, " ")
}

func indent(lines []string) string {
	var b strings.Builder
	for _, l := range lines {
		if strings.HasPrefix(l, "=== ") {
			continue
		}
		b.WriteString("    " + l)
		if !strings.HasSuffix(l, "\n") {
			b.WriteString("\n")
		}
	}
	return b.String()
}

// readSkips reads the list of allowed skips.
func readSkips(path string) ([]*allowed, error) {
	data, err := os.ReadFile(path) //nolint:gosec // the file named on the command line
	if err != nil {
		return nil, err
	}
	var (
		list []*allowed
		errs []error
	)
	for n, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) < 3 {
			errs = append(errs, fmt.Errorf("%s:%d: want a package, a test pattern and a reason", path, n+1))
			continue
		}
		re, err := regexp.Compile("^(?:" + fields[1] + ")$")
		if err != nil {
			errs = append(errs, fmt.Errorf("%s:%d: %w", path, n+1, err))
			continue
		}
		list = append(list, &allowed{pkg: fields[0], test: re, reason: strings.Join(fields[2:], " ")})
	}
	return list, errors.Join(errs...)
}
