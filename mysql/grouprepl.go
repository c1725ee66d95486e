package mysql

// On MySQL Group Replication every member holds every row, and a
// transaction commits once the group has certified its write set: a commit
// a member acknowledged is on a majority. For idem:
//
//   - In single-primary mode the secondaries refuse writes with 1290
//     (super_read_only), and so does a new primary for the moment of its
//     election. Behind a router that sends writes to the wrong member for a
//     moment (a static configuration after a failover), that is "not here,
//     not now", not a read-only database: on a group member Classify makes
//     1290 ErrUnavailable, which Do retries, instead of ErrReadOnly.
//   - In multi-primary mode two members can both win a claim of one key
//     (neither sees the other's uncommitted row); certification lets the
//     first write set ordered commit and refuses the other at COMMIT with
//     3101: ErrSerialization, which Do retries, and the retry replays.
//   - A member that loses the majority while a transaction waits for
//     certification fails its COMMIT with 3100 once
//     group_replication_unreachable_majority_timeout passes. The write set
//     may have reached the majority: commitError makes it ErrCommitUnknown,
//     and the next call of the key replays or does the work once.
//
// GET_LOCK, which serializes Migrate, is local to a member: never run
// Migrate on two members at once (both apply the same steps, and one fails
// with a duplicate key or column); run it from one place and wait until the
// others have applied it.
