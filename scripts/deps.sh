#!/usr/bin/env bash
# Installs what the test bed and the demo need from Debian packages, when it
# is missing.
#
#   scripts/deps.sh          everything `make test` needs: redis-server,
#                            PostgreSQL, pg_auto_failover (the test bed's
#                            Postgres HA group) and etcd-server for the local
#                            provider, debootstrap for building the Docker
#                            images, prometheus for promtool (the alert rules'
#                            checks and unit tests in deploy/prometheus), and
#                            docker-compose where a Docker CLI is installed
#                            (make up, and the compose smoke test, which fails
#                            without it under CI=true)
#   scripts/deps.sh demo     only what `make demo` needs on local processes:
#                            redis-server and PostgreSQL
#   scripts/deps.sh demo-ha  what `make demo-ha` needs: those and
#                            pg_auto_failover
#
# As a non-root user it prints the command instead of running it.
set -euo pipefail

scope=${1:-all}
case $scope in
all | demo | demo-ha) ;;
*) echo "usage: $0 [all|demo|demo-ha]" >&2; exit 2 ;;
esac

missing=()
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
if ! command -v initdb >/dev/null 2>&1 && ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  missing+=(postgresql)
fi
if [ "$scope" != demo ]; then
  # pg_auto_failover's extension is built for one PostgreSQL major: the one
  # installed (the highest, if several), else the one the postgresql
  # package brings on Debian bookworm. Its package brings pg_autoctl.
  pg_major=$(ls -d /usr/lib/postgresql/*/bin/initdb 2>/dev/null | sed 's|^/usr/lib/postgresql/\([0-9]*\)/.*|\1|' | sort -n | tail -n 1)
  pg_major=${pg_major:-15}
  if ! command -v pg_autoctl >/dev/null 2>&1 || [ ! -e "/usr/lib/postgresql/$pg_major/lib/pgautofailover.so" ]; then
    missing+=("postgresql-$pg_major-auto-failover")
  fi
fi
if [ "$scope" = all ]; then
  command -v etcd >/dev/null 2>&1 || missing+=(etcd-server)
  command -v debootstrap >/dev/null 2>&1 || missing+=(debootstrap)
  command -v promtool >/dev/null 2>&1 || missing+=(prometheus)
  if command -v docker >/dev/null 2>&1 && ! command -v docker-compose >/dev/null 2>&1; then
    missing+=(docker-compose)
  fi
fi

# The prometheus and etcd-server packages may start their servers (on
# :9090, and :2379/:2380). Only promtool and the etcd binary are wanted: the
# bed starts its own members on free ports. Stop and disable the services
# so that nothing listens there while the tests run.
stop_service() {
  [ "$(id -u)" -eq 0 ] || return 0
  if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
    systemctl disable --now "$1.service" >/dev/null 2>&1 || true
  fi
  if [ -x "/etc/init.d/$1" ]; then
    "/etc/init.d/$1" stop >/dev/null 2>&1 || true
    command -v update-rc.d >/dev/null 2>&1 && update-rc.d "$1" disable >/dev/null 2>&1 || true
  fi
}

if [ ${#missing[@]} -eq 0 ]; then
  if [ "$scope" = demo ]; then
    echo "deps: redis-server and postgresql are installed"
  elif [ "$scope" = demo-ha ]; then
    echo "deps: redis-server, postgresql and pg_auto_failover are installed"
  else
    echo "deps: redis-server, postgresql, pg_auto_failover, etcd, debootstrap and promtool are installed$(command -v docker-compose >/dev/null 2>&1 && echo ', and docker-compose')"
  fi
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
    case " ${missing[*]} " in *" prometheus "*) stop_service prometheus ;; esac
    case " ${missing[*]} " in *" etcd-server "*) stop_service etcd ;; esac
    exit 0
  fi
  echo "deps: apt-get failed (attempt $attempt), retrying" >&2
  sleep 5
done
exit 1
