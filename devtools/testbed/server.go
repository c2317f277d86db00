package testbed

import (
	"context"
	"path/filepath"
	"syscall"
	"time"
)

// dataMode says what a start does with the node's data directory.
type dataMode int

const (
	// dataWipe starts the server empty.
	dataWipe dataMode = iota
	// dataKeep starts it with what it had persisted, by the bed's policy.
	dataKeep
	// dataRDB starts a Redis server with appendonly no, so that it loads
	// the dump.rdb its data directory holds (Redis ignores an RDB while
	// appendonly is yes); the caller turns the AOF on once it has loaded.
	dataRDB
)

// Kinds of server, which name the binary a runner starts and the image a
// container runs.
const (
	kindRedis    = "redis"
	kindEtcd     = "etcd"
	kindPostgres = "postgres"
)

// server describes one server of the bed, whatever the provider: what it
// runs, where its data lives and how to tell it is ready. A node runs it
// through a runner.
type server struct {
	name string
	kind string
	// dir is the node's own directory on this machine; the server's data
	// directory is dir/data. A container sees both at the same paths.
	dir string
	// ports is how many loopback ports the server listens on.
	ports int
	// args is the command line after the binary, for a start on ports in
	// mode.
	args func(ports []int, mode dataMode) []string
	// env is added to the server's environment (the clock shim's).
	env []string
	// binds are files outside dir a container must see, read-only, at the
	// same paths (the clock shim).
	binds []string
	// setup, when set, is a command (binary first) run to completion
	// before the first start, on this machine (initdb).
	setup []string
	// user is the OS user the server must run as when the bed runs as
	// root (PostgreSQL refuses root); empty for any.
	user string
	// image, when set, is how a container runs the server instead: the
	// image's own entrypoint prepares it, and its port is published.
	image *imageRun
	// probe checks once whether the server at addrs serves.
	probe func(ctx context.Context, addrs []string) error
	// stop is the signal that ends it on close (SIGKILL for most).
	stop syscall.Signal
	// startTimeout bounds each start.
	startTimeout time.Duration
}

// imageRun is a server started by its image's own conventions, on a
// published port rather than on the host's loopback.
type imageRun struct {
	cmd  []string
	env  map[string]string
	port string // the container port, as "5432/tcp"
}

// dataDir is the server's data directory on this machine.
func (s server) dataDir() string { return filepath.Join(s.dir, "data") }

// binary is the program a runner starts for the server.
func (s server) binary() string {
	if s.kind == kindRedis {
		return "redis-server"
	}
	return s.kind
}
