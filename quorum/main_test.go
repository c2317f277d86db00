package quorum_test

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	code := m.Run()
	if err := shared.Close(); err != nil {
		fmt.Fprintf(os.Stderr, "the shared bed: close: %v\n", err)
		code = max(code, 1)
	}
	if code == 0 {
		code = leaks()
	}
	os.Exit(code)
}

// leaks is goleak's check of TestMain (VerifyTestMain), run once the
// shared bed is closed.
func leaks() int {
	err := goleak.Find(
		// toxiproxy v2.5.0: when a proxy stops while a chunk is in flight,
		// its link's writer ends on the closed connection and leaves the
		// no-op stage blocked on its send (link.go write, noop.go Pipe); it
		// holds nothing of the bed's.
		goleak.IgnoreAnyFunction("github.com/Shopify/toxiproxy/v2/toxics.(*NoopToxic).Pipe"),
		// go-redis closes its pools asynchronously.
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
		goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).reaper"),
	)
	if err != nil {
		fmt.Fprintf(os.Stderr, "goleak: Errors on successful test run: %v\n", err)
		return 1
	}
	return 0
}
