package testbed

import "context"

// runner runs one node's server process or container for a provider. A
// node owns the lifecycle (which start, what state, which addresses); the
// runner only does what it is told, on the machine or in docker.
type runner interface {
	// start runs the server, replacing what ran before, on ports (ignored
	// for a server whose image publishes its own port), and returns the
	// host:port addresses it listens on, one per port. It returns once the
	// process runs, before it serves.
	start(ctx context.Context, ports []int, mode dataMode) ([]string, error)
	// exited reports an error once the server has ended, nil while it runs.
	exited(ctx context.Context) error
	// log is the end of the server's output, for error messages.
	log(max int) string
	pause(ctx context.Context) error
	resume(ctx context.Context) error
	// kill sends SIGKILL and waits until the server has ended.
	kill(ctx context.Context) error
	// close ends the server with its stop signal and removes it.
	close(ctx context.Context) error
}
