//go:build chaos

package integration_test

// The long sizes, for `make chaos` (see long_off_test.go).
const (
	floodEvents = 10_000
	floodCopies = 1_000
	chaosRounds = 0
)

// haFaults are the faults of TestPostgresFailover, one after the other on
// one group.
var haFaults = []string{"kill", "pause", "partition", "switchover"}
