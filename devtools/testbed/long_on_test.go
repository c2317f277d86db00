//go:build chaos

package testbed_test

// longHA: see long_off_test.go.
const longHA = true
