//go:build chaos

package integration_test

import "github.com/quorumlock/quorumlock/devtools/nemesis"

// The long sizes, for `make chaos` (see long_off_test.go).
const (
	floodEvents = 10_000
	floodCopies = 1_000
	chaosRounds = 0
)

// haFaults are the faults of TestPostgresFailover, one after the other on
// one group, once per seed of haSeeds.
var haFaults = []string{"kill", "pause", "partition", "switchover"}

// haSeeds are TestPostgresFailover's seeds: each runs its own clients,
// keys and fault timings through haFaults.
var haSeeds = []uint64{20261203, 20261204, 20261205}

// haMemberFaults are TestPostgresHAMembers' faults, one after the other on
// one group: on the standby, and on the monitor.
var haMemberFaults = []haNodeFault{
	{kind: nemesis.KillRestartKeep}, {kind: nemesis.Pause}, {kind: nemesis.Partition},
	{monitor: true, kind: nemesis.KillRestartKeep}, {monitor: true, kind: nemesis.Pause}, {monitor: true, kind: nemesis.Partition},
}
