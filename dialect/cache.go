package dialect

import "sync"

// Statements builds a dialect's statement text once per table and keeps it,
// so no request rebuilds it. It is safe for concurrent use.
type Statements[S any] struct {
	build func(Table) *S
	m     sync.Map // table name -> *S
}

// NewStatements returns a cache that makes a table's statements with build.
func NewStatements[S any](build func(Table) *S) *Statements[S] {
	return &Statements[S]{build: build}
}

// For returns the statements of t, building them the first time.
func (c *Statements[S]) For(t Table) *S {
	if s, ok := c.m.Load(t.Name()); ok {
		return s.(*S)
	}
	s, _ := c.m.LoadOrStore(t.Name(), c.build(t))
	return s.(*S)
}
