#!/usr/bin/env bash
# `make demo`: builds the demo's binaries and runs the seed demo on a test
# bed, installing only what the demo needs.
#
# The bed's provider is QUORUMLOCK_TESTBED (docker, local or auto). auto
# takes docker when the engine answers and the images of `make images`
# exist, else local processes. On local processes the demo needs nothing
# but redis-server and PostgreSQL (scripts/deps.sh demo, run while the Go
# build goes on), and quorumbed is built without the docker provider
# (-tags nodocker), which spares a first run the build of the Docker client
# and testcontainers-go; ordersd is built without its etcd backend (-tags
# noetcd), which spares it etcd's client and gRPC. Building images is left to what needs them: the
# docker provider's tests (make test) and the compose stack (make up).
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}

images_present() {
	docker info >/dev/null 2>&1 || return 1
	local img
	for img in "${QUORUMLOCK_REDIS_IMAGE:-quorumlock/redis:bookworm}" "${QUORUMLOCK_POSTGRES_IMAGE:-quorumlock/postgres:bookworm}"; do
		docker image inspect "$img" >/dev/null 2>&1 || return 1
	done
}

provider=${QUORUMLOCK_TESTBED:-auto}
case $provider in
auto) if images_present; then provider=docker; else provider=local; fi ;;
docker | local) ;;
*) echo "demo: QUORUMLOCK_TESTBED=$provider: want docker, local or auto" >&2; exit 2 ;;
esac

deps_log=$(mktemp "${TMPDIR:-/tmp}/quorumlock-deps.XXXXXX")
trap 'rm -f "$deps_log"' EXIT
deps_pid=
if [ "$provider" = local ]; then
	# apt waits on the network while the compiler uses the cores.
	bash scripts/deps.sh demo >"$deps_log" 2>&1 &
	deps_pid=$!
fi

# One build for the four, so the compiler shares every package and both
# cores. noetcd leaves the etcd backend out of ordersd (the demo's lock is
# on Redis), sparing etcd's client and gRPC; nodocker leaves the docker
# provider out of quorumbed on local processes.
tags=noetcd
[ "$provider" = local ] && tags=noetcd,nodocker
echo "demo: building ordersd, quorumctl, shipper and quorumbed (provider: $provider)"
"$GO" build -tags "$tags" -o bin/ ./cmd/ordersd ./cmd/quorumctl ./cmd/shipper ./devtools/cmd/quorumbed

if [ -n "$deps_pid" ]; then
	if ! wait "$deps_pid"; then
		cat "$deps_log" >&2
		echo "demo: installing redis-server and postgresql failed; see above" >&2
		exit 1
	fi
	grep '^deps:' "$deps_log" || true
fi

QUORUMLOCK_TESTBED=$provider exec bin/quorumbed demo -ordersd bin/ordersd -quorumctl bin/quorumctl -shipper bin/shipper
