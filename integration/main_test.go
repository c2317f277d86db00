package integration_test

import (
	"os"
	"testing"

	"github.com/quorumlock/quorumlock/devtools/chaos"
)

// TestMain lets this test binary double as a chaos worker process: the
// chaos suite re-executes it with the worker's configuration in the
// environment. It removes the binaries the tests built (builds).
func TestMain(m *testing.M) {
	chaos.MaybeWorker()
	code := m.Run()
	builds.remove()
	os.Exit(code)
}
