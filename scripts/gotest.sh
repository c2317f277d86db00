#!/usr/bin/env bash
# The go tests of `make test` (make test-go): every package once, in two go
# test runs that go on at the same time, each TEST_P packages at once:
#
#   RACE_PKGS   with -race (the packages with concurrency of their own, and
#               the libraries and services built on them)
#   PLAIN_PKGS  without it (the packages whose tests spend their time
#               waiting on servers and processes)
#
# The Makefile sets both, each list's slowest packages first so that go
# test starts them first, and README.md ("What runs where") says why each
# package is where it is. The script fails before any test runs when a
# package of ./... is in neither list or in both: nothing is dropped.
#
# While the runs go on it prints what a plain go test prints (each
# package's ok line, the whole output of what fails); at the end, every
# package's time, slowest first, and the slowest tests
# (scripts/testtimes.go). The go test -json streams are kept in
# TEST_OUT (default bin/test/).
set -euo pipefail

GO=${GO:-go}
: "${RACE_PKGS:?RACE_PKGS: the packages to test with -race}"
: "${PLAIN_PKGS:?PLAIN_PKGS: the packages to test without -race}"
p=${TEST_P:-2}
timeout=${TEST_TIMEOUT:-15m}
out=${TEST_OUT:-bin/test}

mkdir -p "$out"
rm -f "$out/race.json" "$out/plain.json"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/quorumlock-gotest.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

# Every package once.
"$GO" list ./... | sort >"$tmp/all"
# shellcheck disable=SC2086 # the lists are package patterns, split on purpose
"$GO" list $RACE_PKGS | sort >"$tmp/race"
# shellcheck disable=SC2086
"$GO" list $PLAIN_PKGS | sort >"$tmp/plain"
both=$(comm -12 "$tmp/race" "$tmp/plain")
none=$(sort -u "$tmp/race" "$tmp/plain" | comm -23 "$tmp/all" -)
if [ -n "$both" ] || [ -n "$none" ]; then
	[ -z "$both" ] || printf 'gotest: in both RACE_PKGS and PLAIN_PKGS:\n%s\n' "$both" >&2
	[ -z "$none" ] || printf 'gotest: in neither RACE_PKGS nor PLAIN_PKGS (add each to one of them in the Makefile):\n%s\n' "$none" >&2
	exit 1
fi
echo "gotest: $(wc -l <"$tmp/race") packages with -race, $(wc -l <"$tmp/plain") without, $p at a time in each run"

"$GO" build -o "$tmp/testtimes" scripts/testtimes.go

# run LABEL ARGS... runs go test ARGS through testtimes, and writes both
# exit statuses to $tmp/LABEL.rc.
run() {
	local label=$1
	shift
	set +e
	"$GO" test -json -count=1 -timeout "$timeout" -p "$p" "$@" 2>&1 |
		"$tmp/testtimes" -label "$label" -save "$out/$label.json" -summary=false
	echo "${PIPESTATUS[*]}" >"$tmp/$label.rc"
}

start=$(date +%s)
# shellcheck disable=SC2086
run race -race $RACE_PKGS &
# shellcheck disable=SC2086
run plain $PLAIN_PKGS &
wait

"$tmp/testtimes" -table "$out/race.json" "$out/plain.json" || true
echo "gotest: both runs ended in $(($(date +%s) - start))s"
status=0
for label in race plain; do
	read -r gotest times <"$tmp/$label.rc"
	if [ "$gotest" != 0 ] || [ "$times" != 0 ]; then
		echo "gotest: the $label run failed (go test exit $gotest, testtimes exit $times)" >&2
		status=1
	fi
done
exit $status
