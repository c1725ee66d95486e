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
// The message's identity is its Nats-Msg-Id header, the id the publisher
// sets so JetStream can drop duplicate publishes; a message without one is
// known by its stream sequence ("seq-" and the number). The stream's name
// is the Message's Queue. Prefer Nats-Msg-Id: it also makes a publish that
// was retried after JetStream's duplicate window one message for the
// consumer.
//
// Settling: Ack is a double ack (it waits for the server to confirm), Retry
// a NakWithDelay (JetStream redelivers after the delay), Reject a
// TermWithReason (JetStream stops delivering it and publishes an advisory,
// which a dead-letter process can subscribe to). Set the consumer's
// MaxDeliver too, so a message that fails forever stops.
//
// The adapter is a few dozen lines; one for another broker is the same four
// methods (see idemqueue.Delivery).
package idemnats
