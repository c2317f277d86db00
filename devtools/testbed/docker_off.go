//go:build nodocker

package testbed

import (
	"context"
	"errors"
)

// newDockerProvider reports that this binary was built without the docker
// provider: `-tags nodocker` leaves out testcontainers-go and the Docker
// client, for tools that run on local processes only (make demo on a
// machine without the images).
func newDockerProvider(context.Context, Options) (provider, error) {
	return nil, errors.New("this binary was built without the docker provider (-tags nodocker); rebuild it without that tag, or use QUORUMLOCK_TESTBED=local")
}
