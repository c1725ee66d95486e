// Package dialect is the contract an idem backend implements, and the
// meanings its errors are mapped to.
//
// # Writing a dialect
//
// A backend is two values. A Dialect holds the SQL rules of one database
// family and no connection: the schema, the claim, complete, lookup and purge
// statements, and Classify, which maps the driver's typed errors to the
// sentinels in this package. A Driver binds a Dialect to one connection pool
// and one native transaction type: it begins transactions the way the
// database needs (BEGIN IMMEDIATE, an isolation level), adapts a caller's
// transaction with Wrap, and runs reads and purge batches on its Pool. Users
// pass the Driver to idem.New; nothing is registered globally, and library
// code never blank-imports a database driver.
//
// Think about these rules of your database before writing SQL:
//
//   - The claim is ONE statement that tells the winner from the loser: an
//     INSERT ... ON CONFLICT DO NOTHING/UPDATE ... RETURNING where the
//     database has it, or an INSERT whose duplicate-key error rolls back only
//     the statement (InnoDB). Never read first and write second, and never
//     rely on a statement error that aborts the caller's transaction.
//   - Complete is a separate statement. Folding it into the claim (a
//     data-modifying CTE) can leave it unable to see the claimed row.
//   - Visibility: the loser must read the latest committed record, whatever
//     snapshot the caller's transaction took before the claim (a locking read
//     on InnoDB), or raise a serialization failure that Do retries.
//   - Waits: a loser waits for the winner's transaction at most
//     ClaimArgs.WaitBound (lock_timeout, innodb_lock_wait_timeout,
//     busy_timeout), then fails with an error Classify maps to ErrLockTimeout.
//     Restore whatever session setting you changed.
//   - Expiry: compare expires_at with the store's clock (ClaimArgs.Now), or
//     the database's clock when it is zero; the boundary is expires_at <= now
//     for "expired" and expires_at > now for "live". Take an expired record
//     over in the claim (or right after it, under the lock the claim holds).
//   - Purge deletes at most PurgeArgs.Limit expired rows per transaction,
//     skipping rows other transactions hold (FOR UPDATE SKIP LOCKED), and
//     never a row a claim has just taken over.
//   - Keys and scopes compare byte for byte (a binary or "C" collation);
//     times keep microseconds and sort exactly.
//   - Classify by typed codes (SQLSTATE, error numbers, extended result
//     codes), never by message text. A COMMIT that may or may not have
//     happened (the connection broke after it was sent) is ErrCommitUnknown.
//
// Statement text is built once per table and cached; validated table names
// (Table) need no escaping beyond your database's identifier quotes.
//
// # Proving it
//
// Run the shared suite from your package's tests; it creates its own tables
// and runs every case in parallel:
//
//	func TestConformance(t *testing.T) {
//		conformance.Run(t, conformance.Backend[*sql.Tx]{
//			Name: "mydb",
//			Open: func(t *testing.T) dialect.Driver[*sql.Tx] {
//				d, err := mydb.New(sharedDB(t))
//				if err != nil {
//					t.Fatal(err)
//				}
//				return d
//			},
//		})
//	}
//
// Report behavioural differences through Capabilities (for example
// DatabaseWriteLock for a database with one writer at a time), never by
// having the suite ask which backend runs. For a server in a container, see
// package conformance/containers.
package dialect
