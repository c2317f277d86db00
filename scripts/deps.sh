#!/usr/bin/env bash
# Installs what the test bed and the demo need from Debian packages, when it
# is missing: redis-server and PostgreSQL for the local provider, debootstrap
# for building the Docker images, prometheus for promtool (the alert rules'
# checks and unit tests in deploy/prometheus), and docker-compose where a
# Docker CLI is installed (make up, and the compose smoke test, which fails
# without it under CI=true). As a non-root user it prints the command
# instead of running it.
set -euo pipefail

missing=()
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
if ! command -v initdb >/dev/null 2>&1 && ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  missing+=(postgresql)
fi
command -v debootstrap >/dev/null 2>&1 || missing+=(debootstrap)
command -v promtool >/dev/null 2>&1 || missing+=(prometheus)
if command -v docker >/dev/null 2>&1 && ! command -v docker-compose >/dev/null 2>&1; then
  missing+=(docker-compose)
fi

# The prometheus package may start a Prometheus server on :9090. Only
# promtool is wanted: stop and disable the service so that nothing listens
# there while the tests run.
stop_prometheus() {
  [ "$(id -u)" -eq 0 ] || return 0
  if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
    systemctl disable --now prometheus.service >/dev/null 2>&1 || true
  fi
  if [ -x /etc/init.d/prometheus ]; then
    /etc/init.d/prometheus stop >/dev/null 2>&1 || true
    command -v update-rc.d >/dev/null 2>&1 && update-rc.d prometheus disable >/dev/null 2>&1 || true
  fi
}

if [ ${#missing[@]} -eq 0 ]; then
  echo "deps: redis-server, postgresql, debootstrap and promtool are installed$(command -v docker-compose >/dev/null 2>&1 && echo ', and docker-compose')"
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
    case " ${missing[*]} " in *" prometheus "*) stop_prometheus ;; esac
    exit 0
  fi
  echo "deps: apt-get failed (attempt $attempt), retrying" >&2
  sleep 5
done
exit 1
