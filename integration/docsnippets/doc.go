// Package docsnippets holds the test that compiles every Go snippet of the
// repository's Markdown (README.md, docs/, examples/*/README.md and any
// other .md file), so that what a reader copies builds.
//
// The convention, for whoever writes a ```go block:
//
//   - A block whose code begins with a package clause is a whole file and
//     compiles as it is, alone in a package (a package whose name ends in
//     _test is compiled as a test file).
//   - Any other block is a fragment. It must come right after (blank lines
//     between are allowed) an HTML comment that gives the code around it:
//
//     <!-- snippet: wrap
//     import (
//     "context"
//
//     "github.com/idemkit/idem"
//     )
//
//     func _(ctx context.Context, store *idem.Store[*sql.Tx]) error {
//     SNIPPET
//     return nil
//     }
//     -->
//
//     The comment's lines are a Go file without its package clause; the
//     line SNIPPET is replaced by the block. GitHub and pkg.go.dev do not
//     render the comment, so readers see the fragment alone, and whoever
//     edits the Markdown sees what the fragment assumes. (An HTML comment
//     cannot hold "--", so a wrapper does not decrement.)
//   - A block that is deliberately not Go that compiles (pseudo-code, an
//     excerpt with "...") is marked ```text, or, to keep Go highlighting,
//     follows <!-- snippet: skip REASON -->. The test counts and lists
//     those.
//
// Blocks of other languages (sh, sql, text) are ignored. Every snippet is a
// package of one temporary module, added to a copy of the repository's
// go.work so that idem's modules resolve from the tree, and one go vet run
// type-checks them all; the whole test files among them then run, with one go
// test.
// Line directives map every error to the Markdown file and line it came
// from.
package docsnippets
