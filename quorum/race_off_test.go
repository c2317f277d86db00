//go:build !race

package quorum_test

// timeScale stretches the tests' timeouts (see race_on_test.go).
const timeScale = 1
