// Package etcdlock is a lock on etcd that implements package lease's API,
// as package quorum does on Redis: Lock, TryLock, LockMulti, Unlock, Extend,
// Do, Lost, Until and Fence, and errors that match lease's sentinels
// (errors.Is(err, lease.ErrNotAcquired), ...). It is the consensus side of the choice the
// README's "Choosing a backend" describes.
//
// The recipe is etcd's own (go.etcd.io/etcd/client/v3/concurrency): every
// waiter puts a key under the lock's prefix, attached to its session's
// lease; the key with the smallest create revision holds the lock, and each
// waiter watches the deletion of its predecessor alone, so a release wakes
// one waiter and no TTL is guessed: the lock is held for as long as the
// session's lease is kept alive, and a holder that dies lets its lease
// expire and its key go.
//
// # Sessions
//
// A Locker keeps one session (one etcd lease, kept alive by the client) for
// all its locks, and opens a new one when it ends. Every lease of a session
// is lost when the session ends: its lease expired (the client was cut off
// or paused past the TTL), or it was revoked. The recipe's key is one per
// session and prefix, so the Locker lets one of its own Lock calls per key
// at a time into the recipe; the others wait their turn in this process.
//
// # Validity
//
// The session's keep-alive replaces Redlock's validity arithmetic. Until is
// the client's conservative view of when the etcd lease could expire: the
// send time of the last refresh etcd answered, plus the TTL, minus the drift
// allowance (WithDriftFactor). The Locker refreshes the lease itself every
// TTL/3 to know those send times, beside the client's own keep-alive, and
// Until never moves back.
//
// What Until guarantees against etcd's own lease clock: etcd's leader
// expires a lease no sooner than a TTL after it received the last refresh,
// which is after the client sent it, and a newly elected leader counts
// every lease's remaining time afresh from its election (the full TTL, or
// a remainder checkpointed earlier), plus an election timeout, so a leader
// change (a leader killed, paused, partitioned or restarted) only moves
// etcd's expiry later. Until therefore comes before etcd's expiry as
// long as the leader's monotonic clock runs no faster than the client's by
// more than the drift allowance. Two exceptions break it, and only a fence
// stops the late holder then: a leader whose monotonic clock jumps forward
// (a VM resumed from suspend) expires leases early; and a leader stuck
// long enough to be replaced (a slow fsync, a starved CPU, a pause) can,
// on etcd releases without the fix of etcd issue 15247, still answer
// refreshes meanwhile and, once it runs again, revoke leases by its own
// stale clock. Wall-clock jumps do not matter: etcd and the client both
// measure with monotonic clocks.
//
// etcdlock itself never hands a key on before that Until. A session ends
// only when etcd no longer knows its lease, when no refresh was answered
// within the validity, when a Lock finds its own recipe key gone, or at
// Close. The client's keep-alive ending is not
// a loss: the client gives a lease up once its own last answer is a TTL
// old (after a pause of the process, say), while a later refresh of the
// Locker's may still hold it, so the Locker asks etcd and goes on
// refreshing alone. When a session does end, its etcd lease (and with it
// the keys of its leases) is revoked only once Until has passed, because a
// holder that is paused cannot hear of the loss; Close revokes at once.
//
// etcd's leader, not the client, decides expiry: a client paused past
// Until may still believe it holds the lock, as with any lock, and only a
// fence stops its writes.
//
// # Fences
//
// Fence is the etcd revision at which the lease became the owner (the
// header of the response that found no predecessor). It is strictly
// increasing per key: an owner's revision is read before it releases, the
// release (a delete, or the lease's expiry) is a later revision, and the
// next owner's revision is read after it saw that release. Revisions are
// the cluster's, so no second system issues them. A resource that is also
// written by writers that do not take the lock (a database arbitrating on
// its own, say) needs one sequence for all its writers: WithFencer replaces
// the revision with that sequence's tokens.
//
// # Several keys
//
// LockMulti takes one recipe lock per key, in sorted order, on one
// session: every caller takes overlapping keys in the same order, so none
// waits in a cycle, and a call that fails releases what it took. Unlike
// quorum's multi-key lease a caller does hold its first keys while it waits
// for the next.
package etcdlock
