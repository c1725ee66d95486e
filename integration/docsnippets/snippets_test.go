package docsnippets

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// A block is one ```go block of a Markdown file.
type block struct {
	file      string // relative to the repository's root
	line      int    // of the block's first code line
	code      []string
	wrapLine  int      // of the wrapper's first line; 0: none
	wrap      []string // the wrapper's lines, SNIPPET among them
	skip      string   // the opt-out's reason
	whole     bool     // begins with a package clause
	fragment  bool     // neither whole nor wrapped nor skipped: an error
	testFile  bool     // a whole file of a _test package
	wrapError string   // what is wrong with the wrapper
}

func (b block) pos() string { return fmt.Sprintf("%s:%d", b.file, b.line) }

var (
	fence   = regexp.MustCompile("^\\s*(```+|~~~+)\\s*([^\\s`]*)")
	pkgLine = regexp.MustCompile(`^package\s+(\w+)`)
)

// TestSnippets compiles every ```go block of every Markdown file of the
// repository, as the package comment says.
func TestSnippets(t *testing.T) {
	root := repoRoot(t)
	var blocks []block
	for _, f := range markdownFiles(t, root) {
		blocks = append(blocks, parse(t, root, f)...)
	}
	if len(blocks) == 0 {
		t.Fatal("no ```go block found: the walk is broken")
	}

	dir := t.TempDir()
	mod := filepath.Join(dir, "snippets")
	if err := os.MkdirAll(mod, 0o750); err != nil {
		t.Fatal(err)
	}
	var whole, wrapped int
	var skipped []string
	for i, b := range blocks {
		switch {
		case b.wrapError != "":
			t.Errorf("%s: %s", b.pos(), b.wrapError)
			continue
		case b.skip != "":
			skipped = append(skipped, b.pos()+": "+b.skip)
			continue
		case b.fragment:
			t.Errorf("%s: a fragment (no package clause) needs a <!-- snippet: wrap ... --> comment before it, or <!-- snippet: skip REASON --> (see package docsnippets)", b.pos())
			continue
		case b.whole:
			whole++
		default:
			wrapped++
		}
		name := "snippet.go"
		if b.testFile {
			name = "snippet_test.go"
		}
		pkg := filepath.Join(mod, fmt.Sprintf("b%03d", i))
		if err := os.MkdirAll(pkg, 0o750); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(pkg, name), []byte(source(root, b)), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d go blocks: %d whole files, %d wrapped fragments, %d not compiled", len(blocks), whole, wrapped, len(skipped))
	for _, s := range skipped {
		t.Logf("not compiled: %s", s)
	}
	if t.Failed() {
		return
	}

	writeWorkspace(t, root, dir)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "vet", "./...")
	cmd.Dir = mod
	cmd.Env = append(os.Environ(), "GOWORK="+filepath.Join(dir, "go.work"))
	out, err := cmd.CombinedOutput()
	if err == nil {
		runTests(ctx, t, mod, blocks)
		return
	}
	// Each message names a Markdown file and line (the line directives);
	// group them by block.
	byBlock := map[int][]string{}
	var other []string
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		line := strings.TrimPrefix(strings.ReplaceAll(sc.Text(), root+string(filepath.Separator), ""), "vet: ")
		if i := owner(blocks, line); i >= 0 {
			byBlock[i] = append(byBlock[i], line)
		} else if line != "" && !strings.HasPrefix(line, "#") {
			other = append(other, line)
		}
	}
	for i, b := range blocks {
		if msgs := byBlock[i]; len(msgs) > 0 {
			t.Errorf("%s: the snippet does not compile:\n\t%s", b.pos(), strings.Join(msgs, "\n\t"))
		}
	}
	if len(byBlock) == 0 || len(other) > 0 {
		t.Errorf("go vet: %v\n%s", err, out)
	}
}

// runTests runs the whole test files among the blocks (a recipe for tests
// must pass, not only compile), all in one go test.
func runTests(ctx context.Context, t *testing.T, mod string, blocks []block) {
	t.Helper()
	args := []string{"test", "-count=1"}
	for i, b := range blocks {
		if b.testFile && b.skip == "" {
			args = append(args, fmt.Sprintf("./b%03d", i))
		}
	}
	if len(args) == 2 {
		return
	}
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = mod
	cmd.Env = append(os.Environ(), "GOWORK="+filepath.Join(filepath.Dir(mod), "go.work"))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// owner returns the index of the block a "file:line:col: message" line
// points into, or -1.
func owner(blocks []block, msg string) int {
	for i, b := range blocks {
		if !strings.HasPrefix(msg, b.file+":") {
			continue
		}
		var n int
		if _, err := fmt.Sscanf(msg[len(b.file)+1:], "%d", &n); err != nil {
			continue
		}
		first, last := b.line, b.line+len(b.code)
		if b.wrapLine > 0 {
			first = b.wrapLine
		}
		if n >= first && n <= last {
			return i
		}
	}
	return -1
}

// source is the Go file of block b, with line directives that point every
// line at its place in the Markdown.
func source(root string, b block) string {
	md := filepath.Join(root, b.file)
	var s strings.Builder
	directive := func(line int) { fmt.Fprintf(&s, "//line %s:%d\n", md, line) }
	if b.whole {
		directive(b.line)
		s.WriteString(strings.Join(b.code, "\n") + "\n")
		return s.String()
	}
	s.WriteString("package snippet\n\n")
	directive(b.wrapLine)
	for i, w := range b.wrap {
		if strings.TrimSpace(w) != "SNIPPET" {
			s.WriteString(w + "\n")
			continue
		}
		directive(b.line)
		s.WriteString(strings.Join(b.code, "\n") + "\n")
		directive(b.wrapLine + i + 1)
	}
	return s.String()
}

// parse returns the ```go blocks of the Markdown file rel.
func parse(t *testing.T, root, rel string) []block {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(root, rel)) //nolint:gosec // a file of the repository
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(data), "\n")
	var blocks []block
	for i := 0; i < len(lines); i++ {
		m := fence.FindStringSubmatch(lines[i])
		if m == nil {
			continue
		}
		open, lang := m[1], strings.ToLower(m[2])
		start := i + 1
		end := start
		for end < len(lines) && !isClose(lines[end], open) {
			end++
		}
		i = end
		if lang != "go" && lang != "golang" {
			continue
		}
		b := block{file: filepath.ToSlash(rel), line: start + 1, code: lines[start:min(end, len(lines))]}
		annotate(&b, lines, start-1)
		blocks = append(blocks, b)
	}
	return blocks
}

func isClose(line, open string) bool {
	s := strings.TrimSpace(line)
	return strings.HasPrefix(s, open) && strings.Trim(s, open[:1]) == ""
}

// annotate reads the HTML comment before the fence at lines[fenceAt] and
// decides what b is.
func annotate(b *block, lines []string, fenceAt int) {
	for _, c := range b.code {
		if c = strings.TrimSpace(c); c == "" || strings.HasPrefix(c, "//") {
			continue
		}
		if m := pkgLine.FindStringSubmatch(c); m != nil {
			b.whole = true
			b.testFile = strings.HasSuffix(m[1], "_test")
		}
		break
	}
	end := fenceAt - 1
	for end >= 0 && strings.TrimSpace(lines[end]) == "" {
		end--
	}
	if end < 0 || !strings.HasSuffix(strings.TrimSpace(lines[end]), "-->") {
		b.fragment = !b.whole
		return
	}
	begin := end
	for begin >= 0 && !strings.HasPrefix(strings.TrimSpace(lines[begin]), "<!--") {
		begin--
	}
	if begin < 0 {
		b.fragment = !b.whole
		return
	}
	head := strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(lines[begin]), "<!--"))
	switch {
	case strings.HasPrefix(head, "snippet: skip"):
		b.skip = strings.TrimSpace(strings.TrimSuffix(strings.TrimPrefix(head, "snippet: skip"), "-->"))
		if b.skip == "" {
			b.wrapError = "<!-- snippet: skip --> needs a reason"
		}
	case head == "snippet: wrap":
		if b.whole {
			b.wrapError = "a whole file (package clause) needs no wrapper"
			return
		}
		b.wrapLine = begin + 2
		b.wrap = lines[begin+1 : end]
		if last := strings.TrimSpace(lines[end]); last != "-->" {
			b.wrapError = "a wrapper comment ends with --> on a line of its own"
		}
		if n := slices.IndexFunc(b.wrap, func(s string) bool { return strings.TrimSpace(s) == "SNIPPET" }); n < 0 {
			b.wrapError = "the wrapper has no SNIPPET line"
		}
	case strings.HasPrefix(head, "snippet"):
		b.wrapError = fmt.Sprintf("unknown snippet comment %q: snippet: wrap or snippet: skip REASON", head)
	default:
		b.fragment = !b.whole
	}
}

// markdownFiles returns every .md file of the repository, relative to
// root, outside .git, testdata and vendor directories.
func markdownFiles(t *testing.T, root string) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch name := d.Name(); {
			case path == root:
			case strings.HasPrefix(name, "."), name == "testdata", name == "vendor", name == "node_modules":
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(path, ".md") {
			rel, err := filepath.Rel(root, path)
			if err != nil {
				return err
			}
			files = append(files, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// repoRoot is the directory of the repository's go.work, above this
// package's directory.
func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.work")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.work above the test's directory: run it from the repository")
		}
		dir = parent
	}
}

// writeWorkspace writes dir/go.work: the repository's modules, by absolute
// path, and dir/snippets, a module of its own; and copies go.work.sum.
func writeWorkspace(t *testing.T, root, dir string) {
	t.Helper()
	cmd := exec.Command("go", "work", "edit", "-json")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go work edit -json: %v", err)
	}
	var work struct {
		Go  string
		Use []struct{ DiskPath string }
	}
	if err := json.Unmarshal(out, &work); err != nil {
		t.Fatal(err)
	}
	var s strings.Builder
	fmt.Fprintf(&s, "go %s\n\nuse (\n\t./snippets\n", work.Go)
	for _, u := range work.Use {
		fmt.Fprintf(&s, "\t%s\n", filepath.Join(root, u.DiskPath))
	}
	s.WriteString(")\n")
	write := func(name, content string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("go.work", s.String())
	write(filepath.Join("snippets", "go.mod"), "module idemdocsnippets\n\ngo "+work.Go+"\n")
	if sum, err := os.ReadFile(filepath.Join(root, "go.work.sum")); err == nil { //nolint:gosec // the repository's
		write("go.work.sum", string(sum))
	}
}
