//go:build race

package quorum_test

// timeScale stretches the tests' timeouts: the race detector slows every
// request several times over.
const timeScale = 4
