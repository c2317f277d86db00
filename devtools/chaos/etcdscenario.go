package chaos

import (
	"fmt"
	"time"

	"github.com/quorumlock/quorumlock/devtools/nemesis"
)

// etcdTTL is the TTL of every etcdlock row. etcd counts TTLs in whole
// seconds, 2s at least, but etcdlock's sessions end by themselves, with no
// fault, at 2s and 3s: Until trails one keep-alive answer behind (the
// previous answer's arrival plus the TTL), and etcd's client answers a
// lease every TTL/3 rounded up to its 500ms send tick, so two answers
// apart exceed the TTL less the drift allowance (2 x 1s > 1.978s at 2s;
// 2 x 1.5s > 2.968s at 3s) and the validity timer ends the session first.
// At 4s two answers are 3s apart, under 3.958s.
const etcdTTL = 4 * time.Second

// etcdScenarios are the scenarios on etcdlock, on the bed's 3-member etcd
// cluster: quorum's scenarios with each fault mapped onto etcd, a row that
// does not apply marked so with the reason, and a clock fault of etcd's
// own. Member faults last up to one TTL (four election timeouts).
func etcdScenarios() []Scenario {
	const fast, staged = etcdTTL, etcdTTL
	const turn = "the leader, then a follower, in turn, "
	s := []Scenario{
		{Name: "long-hold", TTL: fast, LongFrac: 0.25, Rounds: 1, DoubleGrant: no(), drive: quiet(12 * time.Second),
			Faults: "no nemesis; a quarter of the holds outlast the TTL (a GC-like stall in the holder): the session's keep-alive runs on beside them"},
		{Name: "client-pause", TTL: fast, Short: true, Staged: true, Rounds: 3, DoubleGrant: no(), drive: clientPause,
			Faults: "a holder process SIGSTOPped mid critical section (its session's keep-alive stops with it), past its session TTL, until another holder wrote"},
		{Name: "client-kill", TTL: fast, Rounds: 2, DoubleGrant: no(), drive: clientKill,
			Faults: "a holder process SIGKILLed mid critical section; its session's etcd lease expires and frees the lock; a new process replaces it"},
		{Name: "node-pause", TTL: fast, Short: true, Rounds: 4, DoubleGrant: no(), drive: nodeFaults(nemesis.Pause),
			Faults: turn + "SIGSTOPped (docker pause) for up to 1 TTL"},
		{Name: "partition-2-from-1", TTL: fast, Rounds: 4, DoubleGrant: no(), drive: nodeFaults(nemesis.Partition),
			Faults: turn + "cut off from the clients and the other members (client and raft traffic, both ways) for up to 1 TTL; " +
				"the bed has no per-client etcd links, so a member is cut off from every client at once"},
		{Name: "node-latency", TTL: fast, Rounds: 4, DoubleGrant: no(), drive: nodeFaults(nemesis.Latency),
			Faults: turn + "answers late: its replies and its raft messages delayed by up to 1.5 node timeouts"},
	}
	for _, kind := range []string{restartEmpty, restartSnapshot, restartAOFTail} {
		for _, guard := range []bool{false, true} {
			name := fmt.Sprintf("restart-%s/guard=%s", kind, map[bool]string{false: "off", true: "on"}[guard])
			s = append(s, etcdRestart(name, kind, guard, staged))
		}
	}
	s = append(s,
		Scenario{Name: "clock-jump", TTL: staged, Rounds: 2, DoubleGrant: no(), drive: etcdStaged(clockJump),
			Faults: "a holder SIGSTOPped inside its lease while the leader's wall clock jumps forward by 2 TTL (SetClockOffset); " +
				"thawed a quarter TTL before its validity ends, or once another worker read"},
		Scenario{Name: clockJumpMonotonic, TTL: staged, Staged: true, Rounds: 2, DoubleGrant: yes(), drive: etcdStaged(clockJumpMonotonic),
			Faults: "a holder SIGSTOPped inside its lease while the leader's wall and monotonic clocks both jump forward by 2 TTL " +
				"(a leader VM resumed from suspend: SetClockOffset and AdvanceMonotonic); thawed once another worker read, " +
				"or a quarter TTL before its validity ends"},
		Scenario{Name: "carts", Carts: true, TTL: fast, Staged: true, DoubleGrant: no(), Rounds: 4, drive: cartFaults,
			Faults: "one lease on 2-3 of 4 product keys (LockMulti: one recipe lock per key, in key order), every row written in one transaction; " +
				"a holder SIGSTOPped past its session TTL until another cart wrote one of its products, while " + turn +
				"is paused, or killed and restarted with its data"},
	)
	s = append(s, primScenarios(LockEtcd)...)
	for i := range s {
		s[i].Lock = LockEtcd
	}
	return s
}

// etcdRestart is etcdlock's version of a restart row. The bed restarts an
// etcd member with its data only, and raft acknowledges nothing it has not
// fsynced: the member restart is the AOF-tail row's counterpart (a member
// killed with SIGKILL), and the other rows do not apply.
func etcdRestart(name, kind string, guard bool, ttl time.Duration) Scenario {
	sc := Scenario{Name: name}
	switch {
	case guard:
		sc.NA = "etcd has no restart guard: a member fsyncs its raft log before it acknowledges or votes, so a restart forgets nothing; " +
			"the restart-aof-tail/guard=off row is etcd's member restart"
	case kind == restartEmpty:
		sc.NA = "the bed restarts an etcd member with its data directory only; a member without its data cannot rejoin as itself " +
			"(it is removed and added back as a new member, which learns the cluster's state from the leader before it votes), " +
			"so nothing acknowledged is forgotten"
	case kind == restartSnapshot:
		sc.NA = "the bed cannot put an etcd member back on older data, and raft acknowledges only what it has fsynced: " +
			"a member never comes back knowing less than it acknowledged"
	default:
		sc.TTL, sc.Rounds, sc.DoubleGrant, sc.drive = ttl, 2, no(), etcdStaged(memberRestart)
		sc.Faults = "a holder SIGSTOPped inside its lease while the leader is SIGKILLed (etcd fsyncs its log before it acknowledges: " +
			"there is no unsynced tail to lose) and restarted with its data; thawed a quarter TTL before its validity ends, or once another worker read"
	}
	return sc
}
