package main

import (
	"bytes"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// The HTTP transport's connection loops end once the peer's close
		// arrives.
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
		goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
	)
}

// TestRunExitStatus: bad usage is 2 and names no secret; -h is 0; summary
// without files is 2.
func TestRunExitStatus(t *testing.T) {
	secret := strings.Repeat("s", 32)
	env := map[string]string{envJWTSecret: secret, envDatabaseURL: "postgres://u:hunter2@127.0.0.1:1/db"}
	getenv := func(k string) string { return env[k] }
	for _, tc := range []struct {
		args []string
		want int
	}{
		{[]string{"-urls", "http://10.0.0.1:80"}, 2},
		{[]string{"-urls", "http://127.0.0.1:8080", "-distinct", "-1"}, 2},
		{[]string{"-h"}, 0},
		{[]string{"summary"}, 2},
	} {
		var out, errOut bytes.Buffer
		if got := run(t.Context(), tc.args, getenv, &out, &errOut); got != tc.want {
			t.Errorf("%q: status %d, want %d; stderr %s", tc.args, got, tc.want, errOut.String())
		}
		if s := out.String() + errOut.String(); strings.Contains(s, secret) || strings.Contains(s, "hunter2") {
			t.Errorf("%q printed a secret: %s", tc.args, s)
		}
	}
}
