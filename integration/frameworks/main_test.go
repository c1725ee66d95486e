package frameworks_test

import (
	"testing"

	"github.com/idemkit/idem/integration/containers"
)

// TestMain stops the containers the tests of this package started.
func TestMain(m *testing.M) { containers.Main(m) }
