// Package prometheus holds the Prometheus alert rules of quorumlock and
// ordersd (alerts.yml) and their promtool unit tests (alerts_test.yml). It
// has no code: its Go test runs `promtool check rules` and `promtool test
// rules` on them, so that `go test ./...` checks the rules, and checks that
// every alert links to its runbook in docs/OPERATIONS.md and is tested both
// firing and quiet.
//
// The rules come in three grades, never mixed: efficiency (severity
// warning), a defence fired (severity page, urgency daytime) and
// correctness broken (severity critical: stop and reconcile).
//
// promtool comes from Debian's prometheus package; `make deps` installs it.
package prometheus
