// Package chaos runs the Kleppmann workload against the test bed while a
// nemesis injects faults, and reports what the checker found, on both
// locks: quorum's Redlock on 5 Redis masters (fenced with tokens from the
// Postgres issuer) and etcdlock on a 3-member etcd cluster (fenced with
// the etcd revision at which the lease became the owner). Each scenario
// has a version per lock (Scenario.Lock): the faults mapped onto that
// lock's servers, or, where a fault has no counterpart, the reason
// (Scenario.NA).
//
// Workers are separate OS processes (a re-executed test binary, or
// devtools/cmd/chaos itself), so a holder can be frozen with SIGSTOP in the middle of
// its critical section and crashed with SIGKILL: real pauses and real
// crashes, not sleeps inside the holder's own code. Each worker loops:
//
//	lock stock:42 -> read available -> hold (sometimes past the TTL) ->
//	write available-1 -> unlock
//
// The read happens outside any transaction and the write stores the value
// computed from it, so two holders at once lose an update. In a fenced run
// the read is a fencing.Table.Claim and the write a claimed update, so the
// row refuses every holder older than the last one that read it; in the
// unfenced run (the negative control) both are plain statements.
//
// The carts scenario runs another loop: each round takes one lease on 2 or
// 3 of 4 product keys (LockMulti, the keys named in a random
// order), reads every product's row (a Claim with the fence of that row's
// own key, Lease.FenceOf), holds, and writes every row in one transaction:
// a conditional decrement computed from the value read, fenced or plain,
// a line per row (its value before and after, under the row lock) and a
// ledger entry for the cart. One product is scarce, so once it is sold out
// the carts that name it are refused in the middle of their transaction.
// Its checker also requires, per product, that the final stock is the
// initial stock less the units of the committed carts that name it, and
// that every committed cart took exactly its units off every one of its
// rows.
//
// The primitive rows (Scenario.Prim) run the primitives of
// lease.Primitives against a resource in Postgres: a row per slot (a
// permit's key, the read-write lock's or the election's name) holding the
// last fence it let in, and a log of every operation it accepted, each
// applied under one advisory lock so the log's order is the resource's.
// A fenced operation is a conditional update (last_fence <= fence); an
// unfenced one is plain. The semaphore's holders enter with their permit's
// fence, hold, and exit with a second fenced write; the read-write lock's
// readers record their reads' beginning and end (no fence) and its writers
// enter and exit fenced; the election's leaders write twice with their
// term. The log is judged by devtools/checker's model resources in the
// run's mode: no more holders inside than permits and no permit held twice,
// no read overlapping an accepted write, no two leaders in one term and no
// term going down, and no accepted fence below the last. The counter
// semaphore's row (devtools/countersem, which has no fence) runs the
// semaphore's workload with no fault at all and must over-admit.
//
// Every worker prints each operation's call and return as one JSON line on
// its standard output; the parent records them with the faults, and the
// checker counts lost updates, overlapping leases, accepted stale fences
// and rejected stale writes, and checks with porcupine that the fenced
// register's history is linearizable.
//
// The package is a tool for tests and for devtools/cmd/chaos; no production package
// imports it.
package chaos
