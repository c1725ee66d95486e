// Package idem makes retried writes safe. A client sends an idempotency key
// with a write; idem stores the key, a fingerprint of the request and the
// response in the same SQL database and the same transaction as the write
// itself, so a retry replays the first outcome byte for byte instead of doing
// the work twice.
//
// # The lifecycle
//
// A Request is identified by a scope (who is asking and where: a tenant or
// principal plus the route) and a key the client made once for one intention.
// Its Fingerprint hashes what it asks for.
//
//   - Claim runs inside the caller's transaction as one insert that tells the
//     winner from the loser. The winner does its work in the same
//     transaction, then Complete stores the response in a separate statement,
//     then the caller commits: the work and its record commit together, or
//     neither does.
//   - A loser learns what the key holds: Replay (the stored response, byte
//     for byte), Mismatch (the same key with another fingerprint: answer 422,
//     do nothing) or InFlight (another transaction holds the key past the
//     wait bound: answer 409 and let the client retry).
//   - Store.Do owns the transaction and runs the whole lifecycle around a
//     function, retrying serialization failures and deadlocks. While recent
//     requests were mostly retries (Config.ReadFirst, ReadFirstAuto by
//     default) it first reads the key outside any transaction and answers a
//     settled key (Replay, Mismatch) from that read.
//
// # Calling out: lease mode
//
// When the work also calls something outside the database (a payment
// provider, another service), one transaction cannot hold it: Store.DoLease
// (or Store.Lease and its Lease) commits the claim on its own with a lease
// and a fencing token, records recovery points with each step's writes, and
// completes under the token; an expired lease is taken over by exactly one
// retry, which resumes from the last step and sends the same downstream
// keys (Lease.DownstreamKey) to the provider.
//
// # Retention
//
// Every record expires Config.Retention (24 hours by default) after its
// claim while in flight, and after its completion once completed, so a
// winner slower than the retention is never overtaken by a retry that
// waited for it. A claim sets the expiry ExpiryGrace (at most a minute)
// further, so that a completion within the grace does not move it and
// changes no indexed column; a record may therefore live that much longer.
// A client retrying after the window has passed gets the work done a second
// time: the window is part of your API's contract, so document it to your
// clients. An expired key is taken over atomically by the next claim
// (one winner; the old response is cleared). Expiry is decided by one clock
// per store: the database's by default, so application servers with skewed
// clocks agree; Config.Clock overrides it. Store.Purge deletes expired
// records in bounded batches that never wait on claims; run it periodically.
//
// # Backends
//
// A backend is chosen by import and passed to New; nothing registers itself.
// Every backend's constructor has the same shape, New(ctx, handle, Options):
//
//	db, _ := sqlite.Open("orders.db")                        // github.com/idemkit/idem/sqlite
//	driver, _ := sqlite.New(ctx, db, sqlite.Options{})
//	store, _ := idem.New(driver, idem.Config{})
//	_ = store.Migrate(ctx)                                   // the versioned schema
//
// Packages sqlite, postgres (pgx native and database/sql) and mysql (MySQL
// and MariaDB) implement the contract in package dialect for their
// database's conflict and visibility rules; package conformance is the suite
// every backend, including yours, runs to prove it. One store serves every
// isolation level: a call asks for its own with the Isolation option.
//
// # Schema
//
// Store.Migrate brings the table to the latest version of the backend's
// versioned schema and records it; it is safe to run from several processes
// at once, and refuses a database newer than the code (ErrSchemaNewer).
// Store.Migrations gives the same DDL to migration tools, and package
// migrationfiles writes it as golang-migrate or goose files that record
// their version where Store.Migrate looks.
//
// # Operating
//
// Store.Inspect shows one key's record whatever its state; Store.List
// pages through records by scope prefix, state and age; Store.Delete
// clears a key (refusing one a request may still be working on unless
// ForceDelete); Store.Counts counts records by state. RunPurges runs Purge
// on a jittered schedule, safely from every replica. Config.Observer
// receives an Event for each claim, retry, unknown commit, stored response
// and purge (package idemotel makes OpenTelemetry metrics and spans of
// them), and Config.Logger logs what an operator acts on. The idem command
// (cmd/idem) does all of this from a shell.
//
// # Errors
//
// Every error can be tested with errors.Is: bad input (ErrInvalidKey,
// ErrInvalidScope, ErrTooLarge, ErrInvalidConfig, ErrBadTx), misuse
// (ErrNotClaimed, ErrAlreadyCompleted, ErrTxDone), an ability the dialect
// lacks (errors.ErrUnsupported: lease mode, the admin view), and the
// database meanings each dialect maps its typed driver errors to
// (ErrSerialization, ErrDeadlock, ErrLockTimeout, ErrUnavailable,
// ErrCommitUnknown, ...). Errors from the caller's function are returned
// unchanged. Retryable says whether calling again with the same request is
// worth it.
package idem
