package dialect

import (
	"fmt"
	"strconv"
)

// stateNames names every State for messages, listings and command lines. A
// new state gets its name here.
var stateNames = []struct {
	state State
	name  string
}{
	{Pending, "pending"},
	{Completed, "completed"},
}

// String returns the state's name ("pending", "completed"), or State(N) for
// a value this package does not know.
func (s State) String() string {
	for _, n := range stateNames {
		if n.state == s {
			return n.name
		}
	}
	return "State(" + strconv.Itoa(int(s)) + ")"
}

// States returns every state this package knows, in lifecycle order.
func States() []State {
	out := make([]State, len(stateNames))
	for i, n := range stateNames {
		out[i] = n.state
	}
	return out
}

// ParseState returns the state named name (as String writes it). It fails
// with an error wrapping ErrInvalidConfig for an unknown name.
func ParseState(name string) (State, error) {
	for _, n := range stateNames {
		if n.name == name {
			return n.state, nil
		}
	}
	return 0, fmt.Errorf("%w: unknown record state %q (known: %v)", ErrInvalidConfig, name, States())
}
