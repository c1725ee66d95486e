// Package idemnats connects package idemqueue to NATS JetStream: a
// JetStream message as an idemqueue.Delivery, and a message handler for
// jetstream.Consumer.Consume that processes each message once in effect.
//
// It lives in a module of its own (github.com/idemkit/idem/idemnats), so
// that idem's module graph stays free of the NATS client.
//
// JetStream delivers at least once: a message not acknowledged within the
// consumer's AckWait (a consumer that crashed after its commit and before
// its ack, a dropped connection) is delivered again. With idemqueue the
// redelivery finds the message's record, committed with its work, and is
// acknowledged without doing the work again.
//
// # Binding
//
// Bind a durable consumer (explicit acks) once, and take every delivery
// through the Binding (Handler does):
//
//	b, err := idemnats.Bind(ctx, js, cons, idemnats.Options{})
//	defer b.Close()
//	cc, err := cons.Consume(idemnats.Handler(ctx, b, consumer, createOrder, report), jetstream.PullMaxMessages(10))
//
// While a message is worked on (its handler, idem's waits for the database,
// the waits for its key held elsewhere) the Binding reports it in progress
// every third of AckWait, so JetStream neither delivers it again nor spends
// its MaxDeliver on a slow handler. A message waiting in Consume's buffer
// is not reported yet: bound the buffer (PullMaxMessages) so that a
// message starts within AckWait of its delivery.
//
// # Identity
//
// A message's id is its Nats-Msg-Id header, the id its publisher sets so
// JetStream drops duplicate publishes, as "id:" and the header; a message
// without one is known by its place, "seq:" and its stream sequence "@" the
// stream's creation time: a stream deleted and created again starts its
// sequences afresh, and its creation time tells its messages from the old
// ones. The two namespaces cannot collide, whatever a publisher puts in
// the header. Any Nats-Msg-Id is usable: idemqueue keys the record with
// idemqueue.KeyFor of the id, which hashes one that is no valid
// idempotency key (over 252 bytes, since "id:" counts, or with a byte
// outside printable ASCII) instead of rejecting the message. The stream's
// name is the Message's Queue. Prefer Nats-Msg-Id:
// it also makes a publish that was retried after JetStream's duplicate
// window one message for the consumer, and it needs no stream info request
// (an id by place asks for one when the message was stored after the last
// answer, and on a mirror or a stream with sources for every message: their
// messages keep the times their origin stored them with). A message stored
// more than 5 s before its stream was created belongs to a stream since
// deleted: it is retried, never settled, as settling it would settle the
// new stream's message of the same sequence.
//
// # Settling
//
// Ack is a double ack (it waits for the server to confirm), Retry a
// NakWithDelay (JetStream redelivers after the delay), Reject a
// TermWithReason (JetStream stops delivering it and publishes an advisory,
// which a dead-letter process can subscribe to). JetStream confirms an ack
// of a message it already dropped after MaxDeliver, and one that lands
// after AckWait applies to the message's redelivery (nats-server issue
// 4786): the Binding watches the consumer's max-deliveries advisories, and
// a settle of a dropped message fails with ErrDropped (counted in
// Stats.NotSettled and logged) instead of passing as done.
//
// # AckWait, MaxDeliver and WaitBound
//
// AckWait (the consumer's) only has to cover the gap between two
// in-progress reports plus the wait in Consume's buffer, not the handler:
// JetStream's default 30 s suits almost everything; with an AckWait of a
// second or two, consume one message at a time (PullMaxMessages(1)).
// Without a Binding (your own Delivery that is no idemqueue.Extender),
// AckWait must exceed the handler's longest run plus idem's WaitBound plus
// idemqueue's SettleTimeout, or JetStream delivers the message again while
// it is worked on.
//
// WaitBound (idem.Config, 5 s) is how long one claim waits for the
// transaction holding the message's key (on SQLite: holding the database)
// before it answers InFlight; idemqueue then waits InFlightDelay and tries
// again, reporting progress, up to InFlightWait (30 s), and only then hands
// the message back with a NAK. Keep WaitBound well below InFlightWait; it
// need not be below AckWait.
//
// MaxDeliver counts every delivery: one after each handler error or panic
// (Retry after RetryDelay, 100 ms doubling to 30 s), after a crash or a
// lost connection (AckWait), and after a wait for a key in flight that
// outlasted InFlightWait. Set it above idemqueue's MaxPanicDeliveries (3),
// so a poison message is terminated with its reason instead of dropped, and
// as high as the retries you want: MaxDeliver 20 retries a failing handler
// for about six minutes. Keep MaxDeliver times the longest delay between
// deliveries well below idem's Retention (24 h), so every redelivery still
// finds the message's record.
//
// The adapter is a few files; one for another broker is the same four
// methods (see idemqueue.Delivery), plus idemqueue.Extender when the broker
// has an ack deadline.
package idemnats
