package main

import (
	"io"
	"strings"
	"testing"

	"github.com/quorumlock/quorumlock/internal/failpoint"
)

// QUORUMLOCK_FAILPOINTS arms failpoints only in a -tags failpoints build;
// any other build ignores it, bad values included, and says so.
func TestFailpointsConfig(t *testing.T) {
	validEnv(t)
	t.Setenv(failpoint.EnvVar, "after-lock=kill,after-commit=stop")
	c, err := parseConfig(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if failpoint.Enabled != c.failpoints.Armed() || failpoint.Enabled == c.failpoints.Ignored() {
		t.Fatalf("failpoints build %v: armed %v, ignored %v", failpoint.Enabled, c.failpoints.Armed(), c.failpoints.Ignored())
	}

	t.Setenv(failpoint.EnvVar, "after-lunch=kill")
	c, err = parseConfig(nil, io.Discard)
	switch {
	case failpoint.Enabled && (err == nil || !strings.Contains(err.Error(), failpoint.EnvVar)):
		t.Fatalf("an unknown failpoint was accepted: %v", err)
	case !failpoint.Enabled && (err != nil || c.failpoints.Armed() || !c.failpoints.Ignored()):
		t.Fatalf("a production build read the failpoints: %v, armed %v", err, c.failpoints.Armed())
	}
}
