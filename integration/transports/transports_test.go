package transports

import "testing"

// TestTransports runs the generative test on every transport: each a
// subtest, on SQLite; net/http on PostgreSQL too.
func TestTransports(t *testing.T) {
	for _, tr := range []transport{netHTTP, chiTransport, echoTransport, ginTransport, connectTransport, grpcTransport, queueTransport} {
		t.Run(tr.name, func(t *testing.T) {
			t.Parallel()
			runTransport(t, tr, newSQLite(t))
		})
	}
	t.Run("nethttp-postgres", func(t *testing.T) {
		t.Parallel()
		runTransport(t, netHTTP, newPostgres(t))
	})
}
