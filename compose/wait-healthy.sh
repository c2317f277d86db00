#!/usr/bin/env bash
# Waits until every service of the compose stack is up: healthy when it has a
# healthcheck, running when it has none. Exits 0 then. Exits 1 as soon as a
# container exits or turns unhealthy, or when the time runs out, after it
# prints each service's state, the last healthcheck output of the unhealthy
# ones and the tail of the logs of every service that is not up.
#
#   compose/wait-healthy.sh [-p project] [-t seconds]
#
#   -p  the compose project (default: the one docker-compose picks, i.e.
#       COMPOSE_PROJECT_NAME or compose/.env)
#   -t  how long to wait, in seconds (default 300)
#
# It runs docker-compose on compose/docker-compose.yml with this process's
# environment, so the QUORUMLOCK_* variables apply as they did for `up`.
# `make up` and the smoke test (compose/smoke) use it.
set -euo pipefail

dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
project=
timeout=300

usage() { sed -n '2,15s/^# \{0,1\}//p' "${BASH_SOURCE[0]}"; }
while getopts 'p:t:h' opt; do
	case $opt in
	p) project=$OPTARG ;;
	t) timeout=$OPTARG ;;
	h) usage; exit 0 ;;
	*) usage >&2; exit 2 ;;
	esac
done
[[ $timeout =~ ^[0-9]+$ ]] || { echo "wait-healthy: -t wants whole seconds, got '$timeout'" >&2; exit 2; }

compose=(docker-compose -f "$dir/docker-compose.yml")
[[ -z $project ]] || compose+=(-p "$project")

mapfile -t services < <("${compose[@]}" config --services)
((${#services[@]} > 0)) || { echo "wait-healthy: docker-compose lists no services" >&2; exit 1; }

declare -A state # service -> "ok", "wait <why>" or "fail <why>"

# poll fills state for every service from one docker-compose ps and one
# docker inspect.
poll() {
	local svc st health id ids
	state=()
	for svc in "${services[@]}"; do state[$svc]="wait not created"; done
	mapfile -t ids < <("${compose[@]}" ps -q 2>/dev/null)
	((${#ids[@]} > 0)) || return 0
	declare -A seen=()
	while read -r svc st health; do
		[[ -n ${state[$svc]+x} ]] || continue
		local s
		case $st/$health in
		running/healthy | running/) s=ok ;;
		running/unhealthy) s="fail unhealthy" ;;
		running/*) s="wait $health" ;;
		exited/* | dead/*) s="fail $st" ;;
		*) s="wait $st" ;;
		esac
		# Several containers of one service: the worst one counts.
		if [[ -z ${seen[$svc]+x} || $s == fail* || ($s == wait* && ${state[$svc]} == ok) ]]; then
			state[$svc]=$s
		fi
		seen[$svc]=1
	done < <(docker inspect --format \
		'{{index .Config.Labels "com.docker.compose.service"}} {{.State.Status}} {{if .State.Health}}{{.State.Health.Status}}{{end}}' \
		"${ids[@]}" 2>/dev/null || true)
	return 0
}

report() {
	local svc id
	echo "wait-healthy: $1" >&2
	for svc in "${services[@]}"; do
		printf '  %-12s %s\n' "$svc" "${state[$svc]}" >&2
	done
	for svc in "${services[@]}"; do
		[[ ${state[$svc]} == ok ]] && continue
		if [[ ${state[$svc]} == "fail unhealthy" ]]; then
			for id in $("${compose[@]}" ps -q "$svc" 2>/dev/null); do
				echo "--- $svc: last healthcheck outputs" >&2
				docker inspect --format '{{range .State.Health.Log}}exit {{.ExitCode}}: {{.Output}}{{println}}{{end}}' "$id" 2>/dev/null |
					grep -v '^$' | tail -n 3 >&2 || true
			done
		fi
		echo "--- $svc: docker-compose logs --tail 20" >&2
		"${compose[@]}" logs --no-color --tail 20 "$svc" >&2 || true
	done
}

start=$SECONDS
last=
while :; do
	poll
	waiting=() failed=()
	for svc in "${services[@]}"; do
		case ${state[$svc]} in
		ok) ;;
		fail*) failed+=("$svc (${state[$svc]#fail })") ;;
		*) waiting+=("$svc (${state[$svc]#wait })") ;;
		esac
	done
	if ((${#failed[@]} > 0)); then
		report "not healthy: ${failed[*]}"
		exit 1
	fi
	if ((${#waiting[@]} == 0)); then
		echo "wait-healthy: all ${#services[@]} services are up after $((SECONDS - start))s"
		exit 0
	fi
	if ((SECONDS - start >= timeout)); then
		report "still not healthy after ${timeout}s: ${waiting[*]}"
		exit 1
	fi
	if [[ "${waiting[*]}" != "$last" ]]; then
		echo "wait-healthy: waiting for ${waiting[*]}"
		last="${waiting[*]}"
	fi
	sleep 2
done
