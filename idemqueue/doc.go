// Package idemqueue makes a queue consumer's work happen once per message,
// whatever the broker redelivers.
//
// A broker that delivers at least once redelivers a message whose
// acknowledgement it did not get: the consumer crashed between doing the
// work and acknowledging it, its connection dropped, or the ack deadline
// passed. A Consumer runs the message's work (a Handler) and idem's record
// of the message in one transaction, keyed by the message's id (or a key
// the handler picks from it) and scoped to the consumer's name and the
// queue. Any non-empty id makes a key: one that is not a valid idempotency
// key (longer than idem.MaxKeyBytes, or not printable ASCII) is hashed, in
// a namespace no valid id shares (see KeyFor). A redelivery of a message already done finds the record and is
// acknowledged without doing the work again; one that another consumer is
// working on right now is left for redelivery, never done twice.
//
// Process is the broker-free core: it takes a Message (queue, id, data,
// delivery count) and returns a Decision: Ack, Retry with a delay, or
// Reject. Handle does the same for a Delivery, a four-method interface a
// broker adapter implements, and settles it. Package
// github.com/idemkit/idem/idemnats (a module of its own) is the adapter for
// NATS JetStream; see the Delivery documentation for RabbitMQ and Kafka.
//
// What is retried and what is rejected: a handler's error rolls its work
// back and the message is retried with backoff (Config.RetryDelay), since
// most failures (a database hiccup, a deadlock, a dependency down) pass. An
// error wrapped with Permanent, a message without an id, a result too
// large to store, and a mismatch (the same message id with other data)
// cannot pass: the message is rejected, for the broker to terminate or
// dead-letter. Bound redeliveries on the broker too
// (JetStream MaxDeliver, a RabbitMQ quorum queue's delivery-limit), so a
// message that fails forever stops.
//
// A message that fails validation is not an outcome (see
// idem.ErrNotAnOutcome), and a queue needs nothing more to say so: return
// an error wrapped with Permanent, and the work rolls back, nothing is
// stored under the message's key, and the message is rejected. Unlike an
// HTTP client, a broker has no corrected retry of the same message: its
// redelivery carries the same data. The corrected message is a new one,
// with an id of its own; one whose key function picks the same business
// key (Config.Key) finds the key free and runs, since nothing was stored.
//
// A handler's panic does not reach the broker's callback: its transaction
// is rolled back, the panic is logged with its stack, and the message is
// retried with backoff until its delivery count reaches
// Config.MaxPanicDeliveries, then rejected (Decision.Err is a
// *PanicError), so a poison message stops instead of crash-looping every
// consumer.
//
// Brokers whose deliveries expire unless settled in time (JetStream's
// AckWait) keep them alive through an Extender: Handle extends the
// delivery while it works, and waits out an answer that the message's key
// is in flight (ErrInFlight) or that the database was busy past
// idem.Config.WaitBound (ErrBusy, idem.Result.Busy: on SQLite another
// transaction held the write lock, which says nothing about the key),
// processing it again every InFlightDelay up to Config.InFlightWait,
// instead of spending a delivery on it.
//
// The record stores the handler's optional result with status 0
// (idem.NoStatus) and lives for the store's retention (24 hours by
// default): a redelivery after that does the work again, so keep the
// broker's redelivery horizon shorter.
package idemqueue
