#!/usr/bin/env bash
# Tests scripts/apicheck.sh on a throwaway module: the check passes on an
# unchanged or compatibly changed API, fails on an incompatible change, keeps
# failing while the CHANGELOG names the change anywhere but under Changed or
# Removed of [Unreleased] (the negative controls), and passes once it does.
# Run by `make lint`; APIDIFF is the apidiff binary (default: on PATH).
set -euo pipefail

check=$(cd "$(dirname "$0")" && pwd)/apicheck.sh
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp"
export GOWORK=off GOFLAGS= API_PACKAGES=p
export APIDIFF=${APIDIFF:-apidiff}
failures=0

cat >go.mod <<'EOF'
module example.com/apitest

go 1.26
EOF
mkdir p
cat >p/p.go <<'EOF'
// Package p is the API under test.
package p

// F is a function.
func F(a int) int { return a }

// T is a type.
type T struct{}

// M is a method.
func (*T) M() {}
EOF

# expect runs the check and compares its exit status with the one wanted.
expect() {
  local want=$1 what=$2 got=0
  bash "$check" check >"$tmp/out" 2>&1 || got=$?
  if { [ "$want" = pass ] && [ $got -eq 0 ]; } || { [ "$want" = fail ] && [ $got -ne 0 ]; }; then
    echo "ok   $what: $want"
  else
    echo "FAIL $what: wanted $want, exit status $got:"
    sed 's/^/     /' "$tmp/out"
    failures=$((failures + 1))
  fi
}

# expect_output checks that the last run's output holds the given text.
expect_output() {
  if grep -Fq -- "$1" "$tmp/out"; then
    echo "ok   the report says: $1"
  else
    echo "FAIL the report lacks: $1"
    sed 's/^/     /' "$tmp/out"
    failures=$((failures + 1))
  fi
}

changelog() {
  printf '# Changelog\n\n## [Unreleased]\n\n%s\n\n## [0.1.0] - 2026-01-01\n\n%s\n' "$1" "$2" >CHANGELOG.md
}

expect fail "no baseline yet"
expect_output "no baseline api/p.export"
bash "$check" baseline >/dev/null
expect pass "unchanged API"

cat >>p/p.go <<'EOF'

// G is a new function: a compatible change.
func G() {}
EOF
expect pass "compatible change (G added)"

sed -i 's/^func F(a int) int { return a }/func F(a, b int) int { return a + b }/; /^func (\*T) M() {}/d' p/p.go
expect fail "incompatible change, no CHANGELOG"
expect_output '`p.F` incompatible and not named'
expect_output '`p.T.M` incompatible and not named'

changelog '### Added

- `p.F` and `p.T.M` are listed, but under Added.' ''
expect fail "names under Added only (negative control)"

changelog '' '### Changed

- `p.F` takes two arguments.

### Removed

- `p.T.M`.'
expect fail "names under a released version only (negative control)"

changelog '### Changed

<!-- to do: `p.F` and
`p.T.M` -->' ''
expect fail "names inside an HTML comment (negative control)"

changelog '### Changed

- `p.F` takes two arguments.' ''
expect fail "one of two changes named"
expect_output '`p.T.M` incompatible and not named'

changelog '### Changed

- `p.F` takes two arguments.

### Removed

- `p.T.M`: use G.' ''
expect pass "every change named under Changed or Removed of [Unreleased]"
expect_output '`p.F` incompatible, named in CHANGELOG.md'

bash "$check" report >"$tmp/out" 2>&1
expect_output '- `p.F`: changed from func(int) int to func(int, int) int.'
expect_output '- `p.T.M`.'

API_PACKAGES="p missing" expect fail "a listed package that does not exist"
expect_output "missing: no such package"

if [ "$failures" -ne 0 ]; then
  echo "apicheck_test: $failures failed"
  exit 1
fi
echo "apicheck_test: ok"
