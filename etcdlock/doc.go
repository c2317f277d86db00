// Package etcdlock is a lock on etcd that implements package lease's API,
// as package quorum does on Redis: Lock, TryLock, LockMulti, Unlock, Extend,
// Do, Lost, Until and Fence, and errors that match lease's sentinels
// (errors.Is(err, lease.ErrNotAcquired), ...). It is the consensus side of the choice the
// README's "Choosing a backend" describes. Beyond the mutex it builds
// lease.Primitives: a semaphore, a read-write lock and an election, whose
// permits, holds and leaderships are Leases of the same session.
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
//
// # Primitives
//
// The semaphore, the read-write lock and the election put their keys under
// the prefix like locks, attached to the Locker's session: a permit, a
// hold or a leadership is a Lease of that session, with its Until,
// Extend, Lost, Unlock and Do, lost when the session ends. A name is one
// primitive's: a lock, a semaphore, a read-write lock and an election of
// one name would share keys.
//
// A semaphore's permits are slots: permit i is the key name + "/slot/" +
// i, and a holder takes a free slot in one transaction that tries up to 16
// free slots, each only if its key does not exist (from a random one on,
// to spread the claims), and only if the stored count is the handle's.
// Never more than the count are held: the claim of a slot is atomic, and
// there are count slots. Slots, and not the approach of Apache Curator's
// semaphore (anonymous lease nodes, counted after they are made, under a
// lock that orders the makers), for two reasons: a fence per permit needs
// a permit to have an identity, so that a write fenced with slot i's fence
// is rejected once another holder took slot i, while anonymous leases have
// nothing for a fence to follow; and etcd's transaction makes "take slot i
// if free" one atomic step, in one round trip, with neither a lock nor a
// count that a crash between creating and counting leaves wrong. A
// permit's fence is its slot key's create revision (the revision of the
// claim), or the Fencer's token on its Key. A waiter watches the slots for
// a release; one Locker's waiters stand in a line, and only the oldest of
// them, as many as there are permits, try, so up to that many claims are
// in flight at once while a younger waiter of that Locker beyond them does
// not take a freed permit (those within the window, and waiters of
// different Lockers, race). The
// count is stored beside the slots; a handle with another count fails
// while any permit is held, and replaces the count when none is.
//
// A read-write lock orders its readers and writers by their keys' create
// revisions, as the mutex recipe orders its waiters: a reader holds once no
// writer's key is older than its own, a writer once no key at all is. A
// writer that waits thus stops every reader that comes after it (writer
// preference), and a stream of readers cannot starve it. Every key is
// unique (the session's lease id and a sequence number), so the calls of
// one Locker need no turns. A reader's Fence is 0: readers do not exclude
// one another, and the interface gives them no fence; a writer's is the
// revision at which it became the holder, as for a lock, or the Fencer's
// token on the name.
//
// An election runs the recipe's Campaign (go.etcd.io/etcd/client/v3/
// concurrency): the oldest candidacy key leads. Once elected, the
// candidate is fenced, then takes office by writing its term into its key,
// if the key is still the one it put; Leader and Observe report only
// leaders in office. The term, the leadership's Fence, is the key's create
// revision, or the Fencer's token on the election's name. Terms grow from
// leader to leader: a candidate leads once every older key is gone, and
// no key can be created older than one that exists, so each leader's key
// is younger than every earlier leader's; with a Fencer, a leader is
// fenced after it was elected, so after its predecessor's key was gone,
// and so after the predecessor's own token was issued. The next leader is
// let in by the deletion of the leader's key: by Resign, which ends the
// Lease first, or by the expiry or revocation of its session's etcd lease,
// which comes after Until, when the session, and the leadership's Lost
// with it, has ended (see Validity). A session revoked by someone else
// is the exception: the Locker learns it at its next refresh.
package etcdlock
