package frameworks_test

import (
	"testing"

	"github.com/idemkit/idem/integration/containers"
)

func TestMain(m *testing.M) { containers.Main(m) }
