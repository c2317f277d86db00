#!/usr/bin/env bash
# The go tests of `make test` (make test-go): every package once, in go
# test runs that go on at the same time, each TEST_P packages at once:
#
#   RACE_PKGS    with -race (the packages with concurrency of their own,
#                and the libraries and services built on them)
#   PLAIN_PKGS   without it (the packages whose tests spend their time
#                waiting on servers and processes)
#   RACE_SUBSET  a package of PLAIN_PKGS whose top-level tests matching
#   RACE_RUN     the regexp RACE_RUN run with -race, in a run of their own,
#                and are skipped (-skip) in the run of PLAIN_PKGS: each test
#                runs once
#
# The Makefile sets them, each list's slowest packages first so that go
# test starts them first, and README.md ("What runs where") says why each
# package is where it is. The script fails before any test runs when a
# package of ./... is in neither list or in both, and after the runs when
# RACE_RUN matched no test: nothing is dropped.
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
rm -f "$out/race.json" "$out/plain.json" "$out/race-subset.json"
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
subset=${RACE_SUBSET:-}
skip=()
if [ -n "$subset" ]; then
	: "${RACE_RUN:?RACE_RUN: the tests of RACE_SUBSET to run with -race}"
	if ! grep -qxF "$("$GO" list "$subset")" "$tmp/plain"; then
		echo "gotest: RACE_SUBSET $subset is not in PLAIN_PKGS" >&2
		exit 1
	fi
	skip=(-skip "$RACE_RUN")
fi
echo "gotest: $(wc -l <"$tmp/race") packages with -race, $(wc -l <"$tmp/plain") without${subset:+ (and the tests of $subset matching $RACE_RUN with -race)}, $p at a time in each run"

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
labels=(race plain)
if [ -n "$subset" ]; then
	labels=(race-subset race plain)
	run race-subset -race -run "$RACE_RUN" "$subset" &
fi
# shellcheck disable=SC2086
run race -race $RACE_PKGS &
# shellcheck disable=SC2086
run plain "${skip[@]}" $PLAIN_PKGS &
wait

files=()
for label in "${labels[@]}"; do files+=("$out/$label.json"); done
"$tmp/testtimes" -table "${files[@]}" || true
echo "gotest: the runs ended in $(($(date +%s) - start))s"
status=0
for label in "${labels[@]}"; do
	read -r gotest times <"$tmp/$label.rc"
	if [ "$gotest" != 0 ] || [ "$times" != 0 ]; then
		echo "gotest: the $label run failed (go test exit $gotest, testtimes exit $times)" >&2
		status=1
	fi
done
if [ -n "$subset" ] && ! grep -q '"Action":"pass","Package":"[^"]*","Test":"[^"/]*"' "$out/race-subset.json" &&
	! grep -q '"Action":"fail","Package":"[^"]*","Test":' "$out/race-subset.json"; then
	echo "gotest: RACE_RUN $RACE_RUN matched no test of $subset" >&2
	status=1
fi
exit $status
