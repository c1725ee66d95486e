// Package docsnippets holds the test that compiles every Go snippet of the
// repository's Markdown (README.md, docs/, examples/*/README.md and any
// other .md file outside .git, testdata and vendor), so that what a reader
// copies builds. A new page is picked up without a change here.
//
// The convention, for whoever writes a ```go block:
//
// A block whose code begins with a package clause is a whole file and
// compiles as it is, alone in a package. A package whose name ends in
// _test is a test file, and it also runs: a recipe for tests must pass.
//
// Any other block is a fragment. It must come right after (blank lines
// between are allowed) an HTML comment that gives the code around it, a Go
// file without its package clause in which the line SNIPPET stands for the
// block:
//
//	<!-- snippet: wrap
//	import (
//		"context"
//		"database/sql"
//
//		"github.com/idemkit/idem"
//	)
//
//	func _(ctx context.Context, store *idem.Store[*sql.Tx]) error {
//	SNIPPET
//		return nil
//	}
//	-->
//
// GitHub and pkg.go.dev do not render the comment, so readers see the
// fragment alone, and whoever edits the Markdown sees what it assumes. (An
// HTML comment cannot hold "--", so a wrapper does not decrement.)
//
// A block that is deliberately not Go that compiles (pseudo-code, an
// excerpt with "...") is marked ```text, or, to keep Go highlighting,
// follows <!-- snippet: skip REASON -->; the test counts and lists those.
// Blocks of other languages (sh, sql, text) are ignored.
//
// Every snippet becomes a package of one temporary module, added to a
// go.work made of the repository's modules, so that idem's modules resolve
// from the tree; one go vet type-checks them all, then one go test runs the
// whole test files among them. Line directives map every error to the
// Markdown file and line it came from.
package docsnippets
