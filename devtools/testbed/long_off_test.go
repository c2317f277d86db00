//go:build !chaos

package testbed_test

// longHA runs the HA group's partition test, which is not yet reliable on
// a loaded machine: `make chaos` runs it (`-tags chaos`; long_on_test.go).
const longHA = false
