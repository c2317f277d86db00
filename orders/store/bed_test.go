package store_test

import (
	"testing"

	"github.com/quorumlock/quorumlock/devtools/testbed"
	"github.com/quorumlock/quorumlock/devtools/testbed/bedtest"
)

// startPostgres starts the test bed's Postgres for one top-level test.
func startPostgres(t *testing.T) *testbed.PostgresNode {
	t.Helper()
	bed := bedtest.Start(t, testbed.Options{Postgres: true})
	return bed.Postgres
}
