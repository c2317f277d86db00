// Package integration holds the suites that run the whole chain on real
// servers with faults injected: five Redis masters and Postgres from
// devtools/testbed, faults planned by devtools/nemesis, and verdicts
// counted by devtools/checker.
//
// The suites are tests only; this file exists so the package has a doc.
package integration
