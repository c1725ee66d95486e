package docsnippets

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestParse: what the convention makes of each kind of block.
func TestParse(t *testing.T) {
	md := strings.Join([]string{
		"# page",                             // 1
		"```go",                              // 2
		"package main",                       // 3: whole
		"```",                                // 4
		"<!-- snippet: wrap",                 // 5
		"func _() {",                         // 6
		"SNIPPET",                            // 7
		"}",                                  // 8
		"-->",                                // 9
		"",                                   // 10
		"```go",                              // 11
		"x := 1",                             // 12: wrapped
		"```",                                // 13
		"<!-- snippet: skip pseudo-code -->", // 14
		"```go",                              // 15
		"...",                                // 16: skipped
		"```",                                // 17
		"```go",                              // 18
		"y := 2",                             // 19: a fragment without a wrapper
		"```",                                // 20
		"```sh",                              // 21
		"go test ./...",                      // 22: ignored
		"```",                                // 23
		"<!-- snippet: skip -->",             // 24
		"~~~go",                              // 25
		"z := 3",                             // 26: a skip without a reason
		"~~~",                                // 27
		"<!-- snippet: wrap",                 // 28
		"func _() {}",                        // 29
		"-->",                                // 30
		"```go",                              // 31
		"w := 4",                             // 32: a wrapper without SNIPPET
		"```",                                // 33
		"<!-- a note -->",                    // 34
		"```go",                              // 35
		"package x_test",                     // 36: a whole test file after an unrelated comment
		"```",                                // 37
	}, "\n")
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "page.md"), []byte(md), 0o600); err != nil {
		t.Fatal(err)
	}
	blocks := parse(t, root, "page.md")
	want := []struct {
		line                          int
		whole, fragment, test, errors bool
		skip                          string
		wrapLine                      int
	}{
		{line: 3, whole: true},
		{line: 12, wrapLine: 6},
		{line: 16, skip: "pseudo-code"},
		{line: 19, fragment: true},
		{line: 26, errors: true},
		{line: 32, errors: true, wrapLine: 29},
		{line: 36, whole: true, test: true},
	}
	if len(blocks) != len(want) {
		t.Fatalf("%d blocks, want %d: %+v", len(blocks), len(want), blocks)
	}
	for i, w := range want {
		b := blocks[i]
		if b.line != w.line || b.whole != w.whole || b.fragment != w.fragment || b.testFile != w.test ||
			(b.wrapError != "") != w.errors || b.skip != w.skip || b.wrapLine != w.wrapLine {
			t.Errorf("block %d: %+v, want %+v", i, b, w)
		}
	}
	src := source(root, blocks[1])
	for _, s := range []string{"package snippet", "//line " + filepath.Join(root, "page.md") + ":6\nfunc _() {\n", ":12\nx := 1\n", ":8\n}\n"} {
		if !strings.Contains(src, s) {
			t.Errorf("wrapped source lacks %q:\n%s", s, src)
		}
	}
}
