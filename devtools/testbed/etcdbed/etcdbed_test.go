package etcdbed_test

import (
	"slices"
	"testing"
	"time"

	"github.com/quorumlock/quorumlock/devtools/testbed"
	"github.com/quorumlock/quorumlock/devtools/testbed/etcdbed"
)

// TestConfig checks the settings the bed's tests rely on: the given
// endpoints only, a short dial timeout and a logger (etcd's client logs
// to stderr without one).
func TestConfig(t *testing.T) {
	c := etcdbed.Config("127.0.0.1:1", "127.0.0.1:2")
	if !slices.Equal(c.Endpoints, []string{"127.0.0.1:1", "127.0.0.1:2"}) || c.DialTimeout <= 0 || c.DialTimeout > 5*time.Second || c.Logger == nil {
		t.Fatalf("Config = %+v", c)
	}
}

// TestClientWithoutEtcd checks that a bed without etcd members gets an
// error that says so, not a client of no endpoints.
func TestClientWithoutEtcd(t *testing.T) {
	c, err := etcdbed.Client(&testbed.Bed{})
	if err == nil {
		_ = c.Close()
		t.Fatal("Client of a bed without etcd members: no error")
	}
}
