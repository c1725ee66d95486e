package dialect

import (
	"errors"
	"fmt"
)

// MaxIdentifier is the longest table name accepted: the smallest limit of
// the supported databases (MySQL's 64 characters, less room for the index
// names derived from it).
const MaxIdentifier = 48

// ErrInvalidIdentifier is returned for a table name that is not a plain SQL
// identifier.
var ErrInvalidIdentifier = errors.New("invalid SQL identifier")

// Table is a validated table name. Dialects quote it in their own way and
// derive index names from it.
type Table struct{ name string }

// NewTable validates name: 1 to MaxIdentifier characters, ASCII letters,
// digits and underscores, not starting with a digit. Such a name needs no
// quoting in any supported database, so it is never spliced into SQL unsafely.
func NewTable(name string) (Table, error) {
	if name == "" || len(name) > MaxIdentifier {
		return Table{}, fmt.Errorf("%w: %q must be 1 to %d characters", ErrInvalidIdentifier, name, MaxIdentifier)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c == '_', 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z':
		case '0' <= c && c <= '9' && i > 0:
		default:
			return Table{}, fmt.Errorf("%w: %q may hold only ASCII letters, digits and '_', not starting with a digit", ErrInvalidIdentifier, name)
		}
	}
	return Table{name: name}, nil
}

// Name returns the validated name.
func (t Table) Name() string { return t.name }

// Index returns a derived object name such as "<table>_expires".
func (t Table) Index(suffix string) string { return t.name + "_" + suffix }
