//go:build !chaos

package integration_test

import "github.com/quorumlock/quorumlock/devtools/nemesis"

// The sizes of the suites that `make test` runs short and `make chaos`
// runs long (`go test -tags chaos ./integration/`; long_on_test.go).
const (
	// floodEvents is the flood's number of distinct order.paid events,
	// floodCopies how many of them are copied once (10%).
	floodEvents = 2_000
	floodCopies = 200
	// chaosRounds bounds the rounds (staged faults, or nemesis steps) of
	// each row of TestChaosShort; 0 keeps each scenario's own.
	chaosRounds = 1
)

// haFaults are the faults of TestPostgresFailover, one after the other on
// one group, once per seed of haSeeds.
var haFaults = []string{"kill", "switchover"}

// haSeeds are TestPostgresFailover's seeds: each runs its own clients,
// keys and fault timings through haFaults.
var haSeeds = []uint64{20261203}

// haMemberFaults are TestPostgresHAMembers' faults, one after the other on
// one group: on the standby, and on the monitor.
var haMemberFaults = []haNodeFault{
	{kind: nemesis.KillRestartKeep}, {monitor: true, kind: nemesis.Partition},
}
