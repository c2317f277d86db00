// Package fencing issues fencing tokens from Postgres and performs fenced
// writes that the database itself arbitrates.
//
// A lock lease can expire while its holder is still running: the process may
// pause, the network may delay its packets, and the holder may wake up
// believing it still owns the resource. A fencing token closes that gap. Each
// time the lock is granted, the holder receives a number that is strictly
// greater than every number handed out before for the same resource. The
// resource remembers the highest token it has accepted and refuses any write
// that carries a token that is not higher. A late writer holding an old token
// is therefore rejected by the resource, whatever it believes about its lock.
//
// # Issuer
//
// [Issuer] hands out tokens from the fence_counters table (see [Schema]) with
// a single upsert per call. A token is committed before Next returns when the
// issuer runs on a pool, so it survives crashes and restarts of both the
// client and the server, and it never goes backwards. Its method set
// satisfies the quorum package's Fencer interface, without this package
// importing it.
//
// # Reserver and Take
//
// [Reserver] gives a lease its token without a commit of its own: Next
// reads the number the key's counter will give next, and the holder takes
// it with [Take] inside the transaction that writes the resource, which
// moves the counter in the same commit and fails with [ErrStaleFence] when
// any token was taken for the key since. Two holders can reserve the same
// number; at most one takes it. The order service fences a batch of orders
// this way: one lock round, one read and one commit.
//
// # Fenced writes
//
// [Table] describes a table whose rows carry a fence column (last_fence by
// default). [Table.Update] runs
//
//	UPDATE t SET <assignments>, last_fence = $fence
//	WHERE <key> = $key AND <conditions> AND last_fence < $fence
//
// and, when no row changes, re-reads the row to explain why: [ErrStaleFence]
// (the row already accepted an equal or higher fence), [ErrConditionFailed]
// (a business condition such as "available >= quantity" was false) or
// [ErrNotFound] (no such row). The errors are [*RejectedError] values that
// carry the details and match the sentinels with errors.Is.
//
// # Fenced read-modify-write
//
// A fenced write alone protects writes that carry their whole effect, such
// as "available = available - 1". A holder that reads a value outside the
// write, works on it and writes back a result needs more: two holders can
// read the same value, and both writes then pass the fence check in fence
// order, losing one update. [Table.Claim] reads the row and records the
// holder's fence on it in one statement, so every older holder is refused
// from then on; the holder then writes with [Update.Claimed], which passes
// only while the row still carries exactly its fence.
//
// Table and column names are validated and quoted as identifiers, and every
// value travels as a bind parameter, so no input can change the statement's
// shape. Updates take a [Querier], which *pgxpool.Pool, *pgx.Conn and pgx.Tx
// all satisfy, so a fenced write can be one step of a caller's transaction.
package fencing
