// Package transports is a generative test of idem where it meets the
// software around it: the routers, frameworks and RPC stacks it is
// installed in, and the middleware people put in front of it.
//
// For each transport (net/http with a ServeMux, chi, echo, gin, Connect,
// gRPC and idemqueue on an in-memory broker) rapid draws a stack (a body
// read or a form parsed before idem, gin's ShouldBindBodyWith, gzip
// decoding, a body limit, a recoverer, idem installed twice on one route),
// then a sequence of steps: requests (principal, route, path and query
// values, a JSON body with its fields in either order, a form, a multipart
// form, an empty body, gzip), keys, the status the handler answers, how it
// answers, and a fault (the handler fails, panics, hits a retryable
// database error once, runs a failing SQL statement before it answers, is
// slow, or the client hangs up while it runs).
//
// Every request is also sent through the same stack without idem, to learn
// what the handler sees of it. After every step the test checks:
//
//   - a replay answers only a request the handler sees as the one that was
//     answered, and it is the stored answer byte for byte, marked replayed;
//   - an identical retry is replayed, never run again nor refused;
//   - the status the handler chose reaches the client (stored or not, as
//     documented), and the handler saw what it would see without idem;
//   - in the database: exactly one effect for every key with a stored
//     answer, none for work that was rolled back, and no key left pending.
//
// A failure prints the shrunk sequence, one plain line per step, and the
// seed. Replay it with the seed rapid prints, and the same
// -transports.* flags, if any:
//
//	go test ./integration/transports/ -run 'TestTransports/gin$' -rapid.seed=1234
//
// (rapid also keeps the failing sequence in testdata/rapid, which the next
// run tries first; -rapid.nofailfile turns that off.)
//
// Each transport runs until its time budget is spent (IDEM_TRANSPORTS_TIME,
// 8s by default). -transports.stack fixes the stack instead of drawing it
// (a comma list of layer names, "none" for an empty one) and
// -transports.faults narrows the faults drawn:
//
//	go test ./integration/transports/ -run 'TestTransports/chi$' -transports.stack=nested
//
// The net/http transport also runs on PostgreSQL when a container can be
// had (IDEM_POSTGRES_IMAGE), where a failed statement aborts the
// transaction.
package transports
