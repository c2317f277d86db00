// Package smoke holds the smoke test of the compose stack
// (compose/docker-compose.yml). TestStack builds ordersd and fakepay, brings
// the whole stack up under a compose project of its own on free host ports,
// places one order through each of the three ordersd instances, checks that
// each instance's /metrics counts its order and that Prometheus loaded the
// alert rules of deploy/prometheus/alerts.yml and scrapes the three
// instances, and brings the stack down with its volumes, also when it fails.
//
// It needs docker, docker-compose and the local images (make images). When
// one of them is missing it skips, unless CI=true, where it fails instead.
// QUORUMLOCK_TESTBED=local skips it: that run is for the local provider.
//
// The package has no code besides its tests.
package smoke
