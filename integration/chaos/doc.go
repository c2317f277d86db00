// Package chaos runs the Kleppmann workload against the test bed while a
// nemesis injects faults, and reports what the checker found.
//
// Workers are separate OS processes (a re-executed test binary, or
// cmd/chaos itself), so a holder can be frozen with SIGSTOP in the middle of
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
// Every worker prints each operation's call and return as one JSON line on
// its standard output; the parent records them with the faults, and the
// checker counts lost updates, overlapping leases, accepted stale fences
// and rejected stale writes, and checks with porcupine that the fenced
// register's history is linearizable.
//
// The package is a tool for tests and for cmd/chaos; no production package
// imports it.
package chaos
