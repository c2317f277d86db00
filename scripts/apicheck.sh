#!/usr/bin/env bash
# The API compatibility check of `make lint`, and the baseline it compares
# against (CONTRIBUTING.md, "The public API").
#
#   scripts/apicheck.sh check      compare each package's exported API with
#                                  its baseline, api/<pkg>.export; fail on an
#                                  incompatible change that CHANGELOG.md's
#                                  Unreleased section does not name
#   scripts/apicheck.sh baseline   (re)write api/<pkg>.export from the code as
#                                  it is (`make api-baseline`)
#   scripts/apicheck.sh report     print the incompatible changes as draft
#                                  CHANGELOG lines, under ### Changed and
#                                  ### Removed, for a person to reword
#
# Run from the module root. The environment chooses what is checked:
#   API_PACKAGES  the packages, as paths inside the module (quorum etcdlock ...)
#   API_DIR       where the baselines live (default api)
#   CHANGELOG     the changelog (default CHANGELOG.md)
#   APIDIFF       the apidiff binary (default: apidiff on PATH)
#
# The rule: apidiff -incompatible reports each change as "- SUBJECT: what
# changed", SUBJECT being Name, Type.Member or (*Type).Method. Each one is
# written pkg.Name, pkg.Type.Member (pointer receivers lose their "(*...)"),
# e.g. `quorum.Locker.Lock`, and must appear in backquotes under a
# "### Changed" or "### Removed" heading of the "## [Unreleased]" section.
# A package listed but absent from the module, or without a baseline, fails.
set -euo pipefail

mode=${1:-check}
APIDIFF=${APIDIFF:-apidiff}
API_DIR=${API_DIR:-api}
CHANGELOG=${CHANGELOG:-CHANGELOG.md}
read -r -a packages <<<"${API_PACKAGES:-}"
if [ ${#packages[@]} -eq 0 ]; then
  echo "apicheck: API_PACKAGES names no package" >&2
  exit 2
fi
module=$(go list -m)

# exists fails, with the reason, when pkg is not a package of this module.
exists() {
  local pkg=$1
  if ! go list "$module/$pkg" >/dev/null 2>&1; then
    echo "apicheck: $pkg: no such package in $module; remove it from API_PACKAGES or add the package" >&2
    return 1
  fi
}

# named prints the backquoted names of the Unreleased section's Changed and
# Removed subsections, one a line; text inside <!-- --> names nothing.
named() {
  [ -f "$CHANGELOG" ] || return 0
  awk '
    {
      line = ""; rest = $0
      while (rest != "") {
        if (comment) {
          if ((i = index(rest, "-->")) == 0) { rest = ""; break }
          rest = substr(rest, i + 3); comment = 0
        } else if ((i = index(rest, "<!--")) > 0) {
          line = line substr(rest, 1, i - 1); rest = substr(rest, i + 4); comment = 1
        } else { line = line rest; rest = "" }
      }
    }
    line ~ /^## /  { unreleased = (line ~ /^## \[Unreleased\]/); sub_ok = 0; next }
    line ~ /^### / { sub_ok = (line ~ /^### (Changed|Removed)([ (]|$)/); next }
    unreleased && sub_ok {
      while (match(line, /`[^`]+`/)) {
        print substr(line, RSTART + 1, RLENGTH - 2)
        line = substr(line, RSTART + RLENGTH)
      }
    }' "$CHANGELOG"
}

# identifier turns one line of apidiff's report, "- SUBJECT: message", into
# pkg.SUBJECT, with "(*T).M" and "(T).M" written T.M; other lines print nothing.
identifier() {
  local pkg=$1 line=$2
  sed -n -e "/^- [^:]*: /{ s/^- \([^:]*\): .*/\1/; s/^(\*\{0,1\}\([A-Za-z0-9_]*\))\./\1./; s|^|${pkg##*/}.|p; }" <<<"$line"
}

baseline() {
  mkdir -p "$API_DIR"
  for pkg in "${packages[@]}"; do
    exists "$pkg"
    "$APIDIFF" -w "$API_DIR/${pkg//\//_}.export" "$module/$pkg"
    echo "apicheck: wrote $API_DIR/${pkg//\//_}.export"
  done
}

check() {
  local failed=0 names report line id
  names=$(named)
  for pkg in "${packages[@]}"; do
    exists "$pkg" || { failed=1; continue; }
    local base="$API_DIR/${pkg//\//_}.export"
    if [ ! -f "$base" ]; then
      echo "apicheck: $pkg: no baseline $base; run make api-baseline" >&2
      failed=1
      continue
    fi
    if ! report=$("$APIDIFF" -incompatible "$base" "$module/$pkg"); then
      echo "apicheck: $pkg: apidiff failed" >&2
      failed=1
      continue
    fi
    while IFS= read -r line; do
      id=$(identifier "$pkg" "$line")
      [ -n "$id" ] || continue
      if grep -Fqx -- "$id" <<<"$names"; then
        echo "apicheck: \`$id\` incompatible, named in $CHANGELOG: $line"
      else
        echo "apicheck: \`$id\` incompatible and not named under ### Changed or ### Removed of $CHANGELOG's [Unreleased]: $line" >&2
        failed=1
      fi
    done <<<"$report"
  done
  if [ "$failed" -ne 0 ]; then
    echo "apicheck: FAIL" >&2
    return 1
  fi
  echo "apicheck: ok (${packages[*]})"
}

# report prints every incompatible change as a draft CHANGELOG line: the
# removed names under ### Removed, the others, with apidiff's words, under
# ### Changed.
report() {
  local pkg report line id changed="" removed=""
  for pkg in "${packages[@]}"; do
    exists "$pkg"
    [ -f "$API_DIR/${pkg//\//_}.export" ] || continue
    report=$("$APIDIFF" -incompatible "$API_DIR/${pkg//\//_}.export" "$module/$pkg")
    while IFS= read -r line; do
      id=$(identifier "$pkg" "$line")
      [ -n "$id" ] || continue
      case ${line#*: } in
      removed) removed+="- \`$id\`."$'\n' ;;
      *) changed+="- \`$id\`: ${line#*: }."$'\n' ;;
      esac
    done <<<"$report"
  done
  printf '### Changed\n\n%s\n### Removed\n\n%s' "$changed" "$removed"
}

case $mode in
check) check ;;
baseline) baseline ;;
report) report ;;
*) echo "usage: $0 [check|baseline|report]" >&2; exit 2 ;;
esac
