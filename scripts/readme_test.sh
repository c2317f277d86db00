#!/usr/bin/env bash
# Checks that the Go example of the README's Quickstart is, line for line,
# the body of quickstart in quorum/example_quickstart_test.go, which the
# compiler checks (go vet and go test build it). Run by `make lint` from the
# module root; README and EXAMPLE name other files (for this script's test).
set -euo pipefail

readme=${README:-README.md}
example=${EXAMPLE:-quorum/example_quickstart_test.go}

# The first ```go block between "## Quickstart" and the next "## " heading.
want=$(awk '
  /^## / { in_qs = ($0 ~ /^## Quickstart/); next }
  in_qs && /^```go$/ && !done { in_block = 1; next }
  in_block && /^```$/ { in_block = 0; done = 1; next }
  in_block { print }' "$readme")
# The body of func quickstart, one tab of indentation less.
got=$(awk '
  /^func quickstart\(/ { in_fn = 1; next }
  in_fn && /^}$/ { in_fn = 0; next }
  in_fn { sub(/^\t/, ""); print }' "$example")

if [ -z "$want" ]; then
  echo "readme_test: no \`\`\`go block in $readme's Quickstart" >&2
  exit 1
fi
if [ "$want" != "$got" ]; then
  echo "readme_test: $readme's Quickstart example differs from quickstart in $example (want README, got example):" >&2
  diff <(printf '%s\n' "$want") <(printf '%s\n' "$got") >&2 || true
  exit 1
fi
echo "readme_test: ok ($readme's Quickstart example is quickstart in $example)"
