#!/usr/bin/env bash
# scripts/mixedrun.sh [MODE...]: mixed traffic on real processes. For each
# ORDERS_LOCK mode given (auto, on, off; default: auto off) it starts a test
# bed (five Redis masters and Postgres, bin/quorumbed bed --hold), migrates
# the database, starts three ordersd on loopback ports with ORDERS_LOCK=MODE,
# and drives them with devtools/cmd/orderload three times: the distinct
# clients alone, the popular product's buyers alone, both together (mixed).
# Then it stops everything and prints every run's table, and one summary
# table that compares each mode with off in the same traffic.
#
# Settings (environment):
#   MIXEDRUN_DISTINCT  closed-loop clients, each ordering its own product (66)
#   MIXEDRUN_POPULAR   closed-loop clients ordering one popular product (300)
#   MIXEDRUN_SECONDS   measured seconds per run (8); MIXEDRUN_WARMUP (2)
#   MIXEDRUN_TIMEOUT   a client's wait for an answer (2s)
#   MIXEDRUN_LOG_LEVEL ordersd's ORDERS_LOG_LEVEL (warn: info logs a line per request)
#   MIXEDRUN_OUT       directory of the JSON files, logs and top samples (a new temporary one)
#   QUORUMLOCK_TESTBED the bed's provider (local: redis-server and postgres processes)
#
# Heavy: run it alone on the machine, e.g. flock /work/wt/cpu.lock scripts/mixedrun.sh auto off on
# The exit status is 1 when a database check failed or a step did not
# complete; every step is bounded in time, and the EXIT trap stops every
# process the script started.
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}

modes=("$@")
[ ${#modes[@]} -eq 0 ] && modes=(auto off)
for m in "${modes[@]}"; do
	case $m in
	auto | on | off) ;;
	*) echo "mixedrun: mode $m: want auto, on or off" >&2; exit 2 ;;
	esac
done

distinct=${MIXEDRUN_DISTINCT:-66}
popular=${MIXEDRUN_POPULAR:-300}
seconds=${MIXEDRUN_SECONDS:-8}
warmup=${MIXEDRUN_WARMUP:-2}
client_timeout=${MIXEDRUN_TIMEOUT:-2s}
log_level=${MIXEDRUN_LOG_LEVEL:-warn}
for v in "$distinct" "$popular" "$seconds" "$warmup"; do
	case $v in '' | *[!0-9]*) echo "mixedrun: $v: want a whole number" >&2; exit 2 ;; esac
done
export QUORUMLOCK_TESTBED=${QUORUMLOCK_TESTBED:-local}
export TESTCONTAINERS_RYUK_DISABLED=true
out=${MIXEDRUN_OUT:-$(mktemp -d "${TMPDIR:-/tmp}/mixedrun.XXXXXX")}
mkdir -p "$out"

# Every process started, stopped by the EXIT trap.
pids=()
stop_pid() { # pid: SIGTERM, then SIGKILL after 20s
	local pid=$1 i
	kill -TERM "$pid" 2>/dev/null || return 0
	for ((i = 0; i < 200; i++)); do
		kill -0 "$pid" 2>/dev/null || { wait "$pid" 2>/dev/null || true; return 0; }
		sleep 0.1
	done
	kill -KILL "$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
}
stop_all() {
	local i
	for ((i = ${#pids[@]} - 1; i >= 0; i--)); do stop_pid "${pids[i]}"; done
	pids=()
}
trap stop_all EXIT

tags=
[ "$QUORUMLOCK_TESTBED" = local ] && tags=nodocker
echo "mixedrun: building bin/ordersd, bin/quorumbed and bin/orderload (output in $out)"
"$GO" build -o bin/ ./cmd/ordersd
"$GO" build -tags "$tags" -o bin/ ./devtools/cmd/quorumbed ./devtools/cmd/orderload

# free_ports N: N loopback TCP ports no socket uses, below the ephemeral
# range (where outgoing connections take their ports).
free_ports() {
	local n=$1 low p used found=0
	low=$(awk '{print $1}' /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
	p=$((10000 + RANDOM % (low - 11000)))
	used=$(ss -Htan | awk '{print $4; print $5}' | sed 's/.*://' | sort -u)
	while [ "$found" -lt "$n" ] && [ "$p" -lt "$low" ]; do
		if ! grep -qx "$p" <<<"$used"; then echo "$p"; found=$((found + 1)); fi
		p=$((p + 1))
	done
}

# start_bed MODE: starts a bed and exports its ORDERS_* lines.
start_bed() {
	local env_file=$out/bed-$1.env i
	bin/quorumbed bed --hold >"$env_file" 2>"$out/bed-$1.log" &
	pids+=($!)
	for ((i = 0; i < 1200; i++)); do
		grep -q '^# bed is up' "$env_file" && break
		kill -0 "${pids[-1]}" 2>/dev/null || { cat "$out/bed-$1.log" >&2; echo "mixedrun: the bed did not start" >&2; return 1; }
		sleep 0.1
	done
	grep -q '^# bed is up' "$env_file" || { echo "mixedrun: the bed was not up after 120s" >&2; return 1; }
	bed_up=$SECONDS
	ORDERS_REDIS_ADDRS=$(sed -n 's/^ORDERS_REDIS_ADDRS=//p' "$env_file")
	ORDERS_DATABASE_URL=$(sed -n 's/^ORDERS_DATABASE_URL=//p' "$env_file")
	export ORDERS_REDIS_ADDRS ORDERS_DATABASE_URL
}

# start_ordersd MODE: migrates, starts three ordersd and waits until each
# is ready; sets urls.
start_ordersd() {
	local mode=$1 port i n=0 list=()
	bin/ordersd migrate >/dev/null
	for port in $(free_ports 3); do
		n=$((n + 1))
		ORDERS_LOCK=$mode ORDERS_LISTEN=127.0.0.1:$port ORDERS_MIGRATE=false ORDERS_LOG_LEVEL=$log_level \
			ORDERS_PAYMENT_URL=http://127.0.0.1:9 bin/ordersd serve >"$out/ordersd-$mode-$n.log" 2>&1 &
		pids+=($!)
		list+=("http://127.0.0.1:$port")
	done
	for u in "${list[@]}"; do
		for ((i = 0; i < 300; i++)); do
			curl -fsS -m 2 -o /dev/null "$u/readyz" 2>/dev/null && break
			sleep 0.1
		done
		curl -fsS -m 2 -o /dev/null "$u/readyz" || { tail -n 5 "$out"/ordersd-"$mode"-*.log >&2; echo "mixedrun: $u not ready after 30s" >&2; return 1; }
	done
	urls=$(IFS=,; echo "${list[*]}")
}

# cpu_split FILE: the CPU share by command in top's second frame.
cpu_split() {
	awk '/^top - /{frame++; header=0} frame==2 && header {cpu[$12]+=$9} /^ *PID/{header=1}
		END {for (c in cpu) if (cpu[c] >= 1) printf "%s %.0f%%\n", c, cpu[c]}' "$1" | sort -k2 -rn | head -8 | paste -sd ';' | sed 's/;/, /g'
}

# load MODE SHAPE DISTINCT POPULAR: one orderload run.
load() {
	local mode=$1 shape=$2 top_pid=
	if [ "$shape" = mixed ]; then
		# One sample of the CPU split in the middle of the window.
		(sleep $((warmup + seconds / 2 > 1 ? warmup + seconds / 2 - 1 : 0)) && top -b -n2 -d2 -w 200 >"$out/top-$mode.txt") &
		top_pid=$!
	fi
	timeout $((warmup + seconds + 120)) bin/orderload -urls "$urls" -distinct "$3" -popular "$4" \
		-duration "${seconds}s" -warmup "${warmup}s" -timeout "$client_timeout" \
		-label "$mode/$shape" -json "$out/$mode-$shape.json" || status=1
	if [ -n "$top_pid" ]; then
		wait "$top_pid" || true
		echo "CPU split during $mode/mixed (top, % of one core): $(cpu_split "$out/top-$mode.txt")"
	fi
}

status=0
jsons=()
for mode in "${modes[@]}"; do
	echo
	echo "## ORDERS_LOCK=$mode: bed ($QUORUMLOCK_TESTBED), three ordersd, $distinct distinct and $popular popular clients"
	start_bed "$mode"
	ORDERS_JWT_SECRET=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
	export ORDERS_JWT_SECRET
	start_ordersd "$mode"
	# A master votes only once its uptime passes the restart guard's
	# window (ORDERS_LOCK_TTL, 5s): until then the lock falls back to
	# Postgres. The load starts after it.
	rest=$((bed_up + 6 - SECONDS))
	[ "$rest" -gt 0 ] && sleep "$rest"
	load "$mode" distinct "$distinct" 0
	load "$mode" popular 0 "$popular"
	load "$mode" mixed "$distinct" "$popular"
	jsons+=("$out/$mode-distinct.json" "$out/$mode-popular.json" "$out/$mode-mixed.json")
	stop_all
done

echo
echo "## Summary (× off: orders/s over the lock-off run's in the same traffic, same side)"
echo
existing=()
for f in "${jsons[@]}"; do [ -f "$f" ] && existing+=("$f"); done
[ ${#existing[@]} -gt 0 ] && bin/orderload summary "${existing[@]}"
echo
echo "mixedrun: JSON, logs and top samples in $out"
exit $status
