// Command mutate runs the project's mutation pass: for each mutant in a list
// kept in the repository (a file, a snippet that occurs in it exactly once,
// its replacement, and the test command that must fail), it applies the
// mutant to a copy of the work tree, runs the command there, and reports
// whether the tests killed it.
//
// It never edits the work tree: it copies the files git knows (tracked and
// untracked, not ignored) into a temporary directory, mutates one file at a
// time there and puts it back after each run, and removes the copy at the
// end, also when interrupted. Before the mutants it runs each distinct test
// command once on the unmutated copy: a command that fails there proves
// nothing, and the pass stops.
//
// A mutant that a test cannot kill (an equivalent one) is listed with
// "survives:" and the reason; it is reported but does not fail the pass.
// Any other survivor fails it, and so does a listed survivor that got
// killed (the list is stale).
//
//	go run ./scripts/mutate [-list scripts/mutate/mutants.txt] [-run REGEXP] [-timeout 5m]
//
// The list's format: blocks separated by blank lines, lines starting with
// # are comments, each block has the fields
//
//	name:     what the mutant does
//	file:     path from the repository root
//	from:     the original snippet (one line; \n, \t and \\ are escapes)
//	to:       its replacement (same escapes)
//	test:     a shell command, run at the copy's root, that must fail
//	survives: (optional) why no test can kill it
package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"time"
)

// mutant is one entry of the list.
type mutant struct {
	name, file, from, to, test, survives string
	line                                 int // where the block starts in the list
}

func main() {
	list := flag.String("list", "scripts/mutate/mutants.txt", "the mutants, relative to the repository root")
	run := flag.String("run", "", "run only the mutants whose name matches this regular expression")
	timeout := flag.Duration("timeout", 5*time.Minute, "the most one test command may take (a mutant that runs longer counts as killed)")
	test := flag.String("test", "", "run this test command for every mutant instead of its own (to compare what two sets of tests kill)")
	checkOnly := flag.Bool("check", false, "only check that every mutant's snippet occurs exactly once in its file; run no test (CI does this)")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code, err := mutate(ctx, *list, *run, *test, *timeout, *checkOnly)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "mutate:", err)
		if code == 0 {
			code = 2
		}
	}
	os.Exit(code)
}

func mutate(ctx context.Context, listPath, run, test string, timeout time.Duration, checkOnly bool) (int, error) {
	root, err := output(ctx, "", "git", "rev-parse", "--show-toplevel")
	if err != nil {
		return 2, err
	}
	root = strings.TrimSpace(root)
	mutants, err := readList(filepath.Join(root, listPath))
	if err != nil {
		return 2, err
	}
	if run != "" {
		re, err := regexp.Compile(run)
		if err != nil {
			return 2, fmt.Errorf("-run: %w", err)
		}
		mutants = slices.DeleteFunc(mutants, func(m mutant) bool { return !re.MatchString(m.name) })
	}
	if len(mutants) == 0 {
		return 2, errors.New("no mutants to run")
	}
	if test != "" {
		// Another command may kill what the list calls a survivor, or
		// spare what it does not: the notes are for the mutant's own.
		for i := range mutants {
			mutants[i].test, mutants[i].survives = test, ""
		}
	}

	if checkOnly {
		for _, m := range mutants {
			if err := m.check(root); err != nil {
				return 1, err
			}
		}
		fmt.Printf("mutate: the snippets of %d mutants each occur exactly once\n", len(mutants))
		return 0, nil
	}

	copyDir, err := os.MkdirTemp("", "idem-mutate-")
	if err != nil {
		return 2, err
	}
	defer func() {
		if err := os.RemoveAll(copyDir); err != nil {
			fmt.Fprintln(os.Stderr, "mutate: remove the copy:", err)
		}
	}()
	if err := copyTree(ctx, root, copyDir); err != nil {
		return 2, fmt.Errorf("copy the work tree: %w", err)
	}
	for _, m := range mutants {
		if err := m.check(copyDir); err != nil {
			return 2, err
		}
	}

	fmt.Printf("mutate: %d mutants, work tree copied to %s\n", len(mutants), copyDir)
	seen := map[string]bool{}
	for _, m := range mutants {
		if seen[m.test] {
			continue
		}
		seen[m.test] = true
		start := time.Now()
		if out, err := runTest(ctx, copyDir, m.test, timeout); err != nil {
			if ctx.Err() != nil {
				return 2, ctx.Err()
			}
			return 1, fmt.Errorf("the test command fails without any mutant, so it kills nothing: %s\n%s", m.test, tail(out, 40))
		}
		fmt.Printf("baseline ok  %5.1fs  %s\n", time.Since(start).Seconds(), m.test)
	}

	var killed, expected, unexpected, stale, broken int
	for _, m := range mutants {
		start := time.Now()
		out, err, runErr := m.run(ctx, copyDir, timeout)
		if ctx.Err() != nil {
			return 2, ctx.Err()
		}
		if runErr != nil {
			return 2, fmt.Errorf("mutant %q: %w", m.name, runErr)
		}
		elapsed := time.Since(start).Seconds()
		switch {
		case err != nil && notBuilt(out):
			broken++
			fmt.Printf("BROKEN       %5.1fs  %s: does not compile or pass vet, so it tests nothing (line %d)\n%s\n", elapsed, m.name, m.line, tail(out, 8))
		case err != nil && m.survives == "":
			killed++
			fmt.Printf("KILLED       %5.1fs  %s\n", elapsed, m.name)
		case err != nil:
			killed++
			stale++
			fmt.Printf("KILLED       %5.1fs  %s (listed as a survivor: remove \"survives:\" from line %d)\n", elapsed, m.name, m.line)
		case m.survives != "":
			expected++
			fmt.Printf("survived     %5.1fs  %s (known: %s)\n", elapsed, m.name, m.survives)
		default:
			unexpected++
			fmt.Printf("SURVIVED     %5.1fs  %s\n             %s: %q -> %q\n             %s\n%s\n", elapsed, m.name, m.file, m.from, m.to, m.test, tail(out, 10))
		}
	}
	fmt.Printf("mutation score: %d killed of %d (%.0f%%); %d known survivors (equivalent), %d unexpected survivors\n",
		killed, len(mutants), 100*float64(killed)/float64(len(mutants)), expected, unexpected)
	if broken > 0 {
		return 2, fmt.Errorf("%d mutants do not compile: fix them in %s", broken, listPath)
	}
	if unexpected > 0 || stale > 0 {
		return 1, nil
	}
	return 0, nil
}

// check reports an error unless m's snippet occurs exactly once in its file.
func (m mutant) check(dir string) error {
	src, err := os.ReadFile(filepath.Join(dir, m.file))
	if err != nil {
		return fmt.Errorf("mutant %q (line %d): %w", m.name, m.line, err)
	}
	if n := bytes.Count(src, []byte(m.from)); n != 1 {
		return fmt.Errorf("mutant %q (line %d): the snippet occurs %d times in %s, want exactly once: %q", m.name, m.line, n, m.file, m.from)
	}
	return nil
}

// run applies m to the copy, runs its test and puts the file back. A
// failure to put it back is an error of the pass, not a killed mutant.
func (m mutant) run(ctx context.Context, dir string, timeout time.Duration) (out []byte, testErr, err error) {
	path := filepath.Join(dir, m.file)
	orig, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	if err := os.WriteFile(path, bytes.Replace(orig, []byte(m.from), []byte(m.to), 1), 0o600); err != nil {
		return nil, nil, err
	}
	out, testErr = runTest(ctx, dir, m.test, timeout)
	return out, testErr, errors.Join(os.WriteFile(path, orig, 0o600), removeFailFiles(dir))
}

// removeFailFiles deletes the fail files rapid saved in the copy
// (testdata/rapid of any package): rapid replays them on its next run, so
// one mutant's failure would be tried against every mutant after it.
func removeFailFiles(dir string) error {
	return filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		if d.Name() == "rapid" && filepath.Base(filepath.Dir(path)) == "testdata" {
			if err := os.RemoveAll(path); err != nil {
				return err
			}
			return filepath.SkipDir
		}
		return nil
	})
}

// notBuilt reports whether go test's output says a package did not build
// (or failed vet, which go test runs first).
func notBuilt(out []byte) bool {
	return bytes.Contains(out, []byte("[build failed]")) || bytes.Contains(out, []byte("[setup failed]"))
}

// runTest runs a shell command at dir in a process group of its own, killed
// whole when timeout passes or ctx ends.
func runTest(ctx context.Context, dir, command string, timeout time.Duration) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-c", command)
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	out, err := cmd.CombinedOutput()
	if ctx.Err() == context.DeadlineExceeded {
		err = fmt.Errorf("timed out after %v: %w", timeout, err)
	}
	return out, err
}

// copyTree copies the files git knows (tracked, and untracked but not
// ignored) from root to dst.
func copyTree(ctx context.Context, root, dst string) error {
	files, err := output(ctx, root, "git", "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	if err != nil {
		return err
	}
	for _, name := range strings.Split(strings.TrimRight(files, "\x00"), "\x00") {
		src := filepath.Join(root, name)
		info, err := os.Lstat(src)
		if errors.Is(err, os.ErrNotExist) {
			continue // deleted in the work tree, not yet in the index
		}
		if err != nil {
			return err
		}
		if !info.Mode().IsRegular() {
			continue
		}
		if err := copyFile(src, filepath.Join(dst, name), info.Mode().Perm()); err != nil {
			return err
		}
	}
	return nil
}

func copyFile(src, dst string, perm os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil { //nolint:gosec // a temporary copy of the work tree
		return err
	}
	in, err := os.Open(src) //nolint:gosec // a file git lists in the repository
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, perm) //nolint:gosec // a temporary copy of the work tree
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

func output(ctx context.Context, dir, name string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("%s %s: %w", name, strings.Join(args, " "), err)
	}
	return string(out), nil
}

// readList parses the list of mutants.
func readList(path string) ([]mutant, error) {
	f, err := os.Open(path) //nolint:gosec // the list named on the command line
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var (
		mutants []mutant
		cur     *mutant
		errs    []error
	)
	flush := func() {
		if cur == nil {
			return
		}
		switch {
		case cur.name == "", cur.file == "", cur.from == "", cur.test == "":
			errs = append(errs, fmt.Errorf("%s:%d: a mutant needs name, file, from and test", path, cur.line))
		case cur.from == cur.to:
			errs = append(errs, fmt.Errorf("%s:%d: mutant %q changes nothing", path, cur.line, cur.name))
		default:
			mutants = append(mutants, *cur)
		}
		cur = nil
	}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		switch trimmed := strings.TrimSpace(line); {
		case trimmed == "":
			flush()
			continue
		case strings.HasPrefix(trimmed, "#"):
			continue
		}
		field, value, ok := strings.Cut(line, ":")
		if !ok {
			errs = append(errs, fmt.Errorf("%s:%d: want \"field: value\", got %q", path, n, line))
			continue
		}
		if cur == nil {
			cur = &mutant{line: n}
		}
		value = strings.TrimSpace(value)
		switch strings.TrimSpace(field) {
		case "name":
			cur.name = value
		case "file":
			cur.file = value
		case "from":
			cur.from = unescape(value)
		case "to":
			cur.to = unescape(value)
		case "test":
			cur.test = value
		case "survives":
			cur.survives = value
		default:
			errs = append(errs, fmt.Errorf("%s:%d: unknown field %q", path, n, field))
		}
	}
	flush()
	if err := sc.Err(); err != nil {
		errs = append(errs, err)
	}
	return mutants, errors.Join(errs...)
}

// unescape turns \n, \t and \\ into a newline, a tab and a backslash.
func unescape(s string) string {
	return strings.NewReplacer(`\\`, `\`, `\n`, "\n", `\t`, "\t").Replace(s)
}

func tail(b []byte, lines int) string {
	all := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return "             | " + strings.Join(all, "\n             | ")
}
