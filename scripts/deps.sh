#!/usr/bin/env bash
# Installs what the test bed and the demo need from Debian packages, when it
# is missing: redis-server and PostgreSQL for the local provider, debootstrap
# for building the Docker images. As a non-root user it prints the command
# instead of running it.
set -euo pipefail

missing=()
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
if ! command -v initdb >/dev/null 2>&1 && ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  missing+=(postgresql)
fi
command -v debootstrap >/dev/null 2>&1 || missing+=(debootstrap)

if [ ${#missing[@]} -eq 0 ]; then
  echo "deps: redis-server, postgresql and debootstrap are installed"
  exit 0
fi

cmd="apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends ${missing[*]}"
if [ "$(id -u)" -ne 0 ]; then
  echo "deps: missing ${missing[*]}; run as root:" >&2
  echo "  sudo sh -c '$cmd'" >&2
  exit 1
fi
echo "deps: installing ${missing[*]}"
for attempt in 1 2 3; do
  if sh -c "$cmd"; then
    exit 0
  fi
  echo "deps: apt-get failed (attempt $attempt), retrying" >&2
  sleep 5
done
exit 1
