package conformance

import (
	"fmt"
	"testing"

	"pgregory.net/rapid"
)

// quietTB is a testing.T whose rapid failures are recorded, not reported.
type quietTB struct {
	*testing.T
	failures []string
}

func (q *quietTB) Errorf(format string, args ...any) {
	q.failures = append(q.failures, fmt.Sprintf(format, args...))
}
func (q *quietTB) Error(args ...any)                 { q.failures = append(q.failures, fmt.Sprint(args...)) }
func (q *quietTB) Fatalf(format string, args ...any) { q.Errorf(format, args...) }
func (q *quietTB) Fatal(args ...any)                 { q.Error(args...) }
func (q *quietTB) Fail()                             { q.failures = append(q.failures, "Fail") }
func (q *quietTB) FailNow()                          {}
func (q *quietTB) Failed() bool                      { return false }

// TestRapidInvalidData: the model tells rapid's own panic for a draw its
// data cannot serve (a stale fail file, a shrink attempt) from a failure,
// so that such a panic does not lift the model's budget for good. The
// panic's type is rapid's unexported invalidData: this fails if rapid
// renames it.
func TestRapidInvalidData(t *testing.T) {
	var skips, others int
	q := &quietTB{T: t}
	rapid.Check(q, func(rt *rapid.T) {
		defer func() {
			p := recover()
			if p == nil {
				return
			}
			if rapidInvalidData(p) {
				skips++
			} else {
				others++
			}
			panic(p)
		}()
		rt.Skip("no data for this draw")
	})
	if skips == 0 || others != 0 {
		t.Fatalf("rapid's Skip panics: %d recognised, %d not; want every one recognised", skips, others)
	}
	if rapidInvalidData(fmt.Errorf("a store's panic")) || rapidInvalidData(nil) {
		t.Fatal("a store's panic (or none) taken for rapid's invalid data")
	}
}
