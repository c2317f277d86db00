#!/usr/bin/env bash
# Builds the local Redis, etcd, Postgres and Prometheus images used by the
# test bed and the compose stack, from Debian packages only (no container
# registry needed).
#
#   compose/images/build.sh [--force]
#
# One Debian bookworm rootfs is bootstrapped with debootstrap from the mirror
# in this machine's apt configuration, redis-server, etcd-server,
# postgresql-15 (with pg_auto_failover: postgresql-15-auto-failover, which
# brings pg_autoctl) and prometheus are installed into it, a Postgres data
# dir is initialised, and the tree is imported four times with `docker
# import`, each time with its own metadata (the images share their one
# layer):
#
#   ${QUORUMLOCK_REDIS_IMAGE:-quorumlock/redis:bookworm}
#   ${QUORUMLOCK_ETCD_IMAGE:-quorumlock/etcd:bookworm}
#   ${QUORUMLOCK_POSTGRES_IMAGE:-quorumlock/postgres:bookworm}
#   ${QUORUMLOCK_PROMETHEUS_IMAGE:-quorumlock/prometheus:bookworm}
#
# The build is skipped when all four images exist; --force rebuilds them.
# QUORUMLOCK_DEBIAN_MIRROR overrides the mirror read from apt.
set -euo pipefail

readonly SUITE=bookworm
readonly PG_MAJOR=15
readonly PG_BIN=/usr/lib/postgresql/${PG_MAJOR}/bin
readonly PG_DATA=/var/lib/postgresql/data
readonly PG_SUPERUSER=quorumlock
readonly PG_PASSWORD=quorumlock
readonly PG_DATABASE=quorumlock
readonly REDIS_IMAGE=${QUORUMLOCK_REDIS_IMAGE:-quorumlock/redis:${SUITE}}
readonly ETCD_IMAGE=${QUORUMLOCK_ETCD_IMAGE:-quorumlock/etcd:${SUITE}}
readonly POSTGRES_IMAGE=${QUORUMLOCK_POSTGRES_IMAGE:-quorumlock/postgres:${SUITE}}
readonly PROMETHEUS_IMAGE=${QUORUMLOCK_PROMETHEUS_IMAGE:-quorumlock/prometheus:${SUITE}}
readonly PROM_DATA=/prometheus
readonly ETCD_DATA=/var/lib/etcd
readonly IMAGES=("$REDIS_IMAGE" "$ETCD_IMAGE" "$POSTGRES_IMAGE" "$PROMETHEUS_IMAGE")
readonly PACKAGES=(redis-server etcd-server "postgresql-${PG_MAJOR}" "postgresql-${PG_MAJOR}-auto-failover" prometheus)

log() { printf '[images] %s\n' "$*"; }
die() { printf '[images] error: %s\n' "$*" >&2; exit 1; }

usage() {
	cat <<EOF
usage: $0 [--force]

Builds ${REDIS_IMAGE}, ${ETCD_IMAGE},
${POSTGRES_IMAGE} and ${PROMETHEUS_IMAGE} from Debian ${SUITE}
packages with debootstrap and docker import. Needs root, docker and
debootstrap.

  --force   rebuild even when all four images already exist
EOF
}

force=0
for arg in "$@"; do
	case $arg in
	--force) force=1 ;;
	-h | --help) usage; exit 0 ;;
	*) usage >&2; die "unknown argument: $arg" ;;
	esac
done

# ---- timing ------------------------------------------------------------------

build_start=$(date +%s%N)
phase_name=
phase_start=0
phase() {
	phase_end
	phase_name=$1
	phase_start=$(date +%s%N)
	log "phase: $phase_name"
}
phase_end() {
	if [[ -n $phase_name ]]; then
		local ms=$((($(date +%s%N) - phase_start) / 1000000))
		log "phase: $phase_name done in $((ms / 1000)).$(printf '%03d' $((ms % 1000)))s"
		phase_name=
	fi
}

# ---- preflight -----------------------------------------------------------------

command -v docker >/dev/null 2>&1 ||
	die "the docker CLI is missing; fix with: apt-get install -y docker.io"
if ! docker_err=$(docker version --format '{{.Server.Version}}' 2>&1); then
	if [[ $docker_err == *"permission denied"* ]]; then
		die "no access to the docker engine; run: sudo $0 $*"
	fi
	die "the docker engine does not answer (${docker_err##*$'\n'}); fix with: systemctl start docker"
fi

if ((!force)); then
	absent=()
	for image in "${IMAGES[@]}"; do
		docker image inspect "$image" >/dev/null 2>&1 || absent+=("$image")
	done
	if ((${#absent[@]} == 0)); then
		log "skip: ${IMAGES[*]} already exist (use --force to rebuild)"
		exit 0
	fi
	log "missing: ${absent[*]}; building all four"
fi

if [[ $(id -u) -ne 0 ]]; then
	die "building the images needs root (debootstrap, chroot); run: sudo $0 $*"
fi
command -v debootstrap >/dev/null 2>&1 ||
	die "debootstrap is missing; fix with: apt-get install -y debootstrap"

# ---- the mirror, from this machine's apt configuration --------------------------

# apt_entries prints "URI SUITE" for every enabled deb entry in the apt sources,
# deb822 files (*.sources) first, then one-line files (*.list).
apt_entries() {
	local f
	for f in /etc/apt/sources.list.d/*.sources; do
		[[ -r $f ]] || continue
		awk '
			function flush(   n, m, i, j, u, s) {
				if (types ~ /(^|[ \t])deb([ \t]|$)/ && enabled != "no") {
					n = split(uris, u, /[ \t]+/); m = split(suites, s, /[ \t]+/)
					for (i = 1; i <= n; i++) for (j = 1; j <= m; j++)
						if (u[i] != "" && s[j] != "") print u[i], s[j]
				}
				types = uris = suites = cur = ""; enabled = "yes"
			}
			BEGIN { enabled = "yes" }
			/^[ \t]*#/ { next }
			/^[ \t]*$/ { flush(); next }
			/^[A-Za-z0-9-]+:/ {
				cur = tolower(substr($0, 1, index($0, ":") - 1))
				val = substr($0, index($0, ":") + 1); gsub(/^[ \t]+|[ \t]+$/, "", val)
				if (cur == "types") types = val
				else if (cur == "uris") uris = val
				else if (cur == "suites") suites = val
				else if (cur == "enabled") enabled = tolower(val)
				next
			}
			/^[ \t]/ {
				val = $0; gsub(/^[ \t]+|[ \t]+$/, "", val)
				if (cur == "types") types = types " " val
				else if (cur == "uris") uris = uris " " val
				else if (cur == "suites") suites = suites " " val
			}
			END { flush() }
		' "$f"
	done
	for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
		[[ -r $f ]] || continue
		awk '
			$1 == "deb" {
				i = 2
				if ($i ~ /^\[/) { while (i <= NF && $i !~ /\]$/) i++; i++ }
				if (i + 1 <= NF) print $i, $(i + 1)
			}
		' "$f"
	done
}

usable_uri() { [[ $1 =~ ^(https?|file):/ ]]; }

# The main archive: an entry for the suite itself, else any entry that is not
# the security archive (the archive serves every release, whatever the host runs).
# The security archive: an entry whose suite ends in -security.
mirror=${QUORUMLOCK_DEBIAN_MIRROR:-}
security_mirror=
main_exact=''
main_any=''
while read -r uri suite; do
	usable_uri "$uri" || continue
	uri=${uri%/}
	case $suite in
	"$SUITE") [[ -n $main_exact ]] || main_exact=$uri ;;
	*-security | */updates) [[ -n $security_mirror ]] || security_mirror=$uri ;;
	*) [[ -n $main_any ]] || main_any=$uri ;;
	esac
done < <(apt_entries)
mirror=${mirror:-${main_exact:-$main_any}}
[[ -n $mirror ]] || die "no Debian mirror found in /etc/apt/sources.list or /etc/apt/sources.list.d/*.sources
(need an enabled 'deb' entry with an http(s):// or file:/ URI); add one, or set QUORUMLOCK_DEBIAN_MIRROR=<url>"
log "mirror: $mirror${security_mirror:+ (security: $security_mirror)}"

# apt settings the host needs to reach its mirror are passed on to the build.
apt_conf=()
eval "$(apt-config shell valid_until Acquire::Check-Valid-Until check_date Acquire::Check-Date \
	http_proxy_conf Acquire::http::Proxy https_proxy_conf Acquire::https::Proxy)"
[[ ${valid_until:-} == false ]] && apt_conf+=('Acquire::Check-Valid-Until "false";')
[[ ${check_date:-} == false ]] && apt_conf+=('Acquire::Check-Date "false";')
if [[ -n ${http_proxy_conf:-} && ${http_proxy_conf} != DIRECT ]]; then
	apt_conf+=("Acquire::http::Proxy \"${http_proxy_conf}\";")
	export http_proxy=${http_proxy:-$http_proxy_conf}
fi
if [[ -n ${https_proxy_conf:-} && ${https_proxy_conf} != DIRECT ]]; then
	apt_conf+=("Acquire::https::Proxy \"${https_proxy_conf}\";")
	export https_proxy=${https_proxy:-$https_proxy_conf}
fi

# ---- work dir ------------------------------------------------------------------

work=$(mktemp -d "${TMPDIR:-/tmp}/quorumlock-images.XXXXXX")
rootfs=$work/rootfs
# Every later path is under $rootfs; never let it be empty or relative.
[[ -d $work && $rootfs == /*/rootfs ]] || die "bad work dir: '$work'"

unmount_all() {
	# Everything mounted under the rootfs (our /proc, or what an interrupted
	# debootstrap left), deepest first.
	local m
	while read -r m; do
		umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
	done < <(awk -v r="$rootfs" '$2 == r || index($2, r "/") == 1 { print $2 }' /proc/self/mounts | sort -r)
}
cleanup() {
	local rc=$?
	trap - EXIT INT TERM
	phase_end
	unmount_all
	if awk -v r="$rootfs" 'index($2, r) == 1 { found = 1 } END { exit !found }' /proc/self/mounts; then
		printf '[images] error: mounts remain under %s; not removing %s\n' "$rootfs" "$work" >&2
	else
		rm -rf --one-file-system "$work"
	fi
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

in_root() { chroot "$rootfs" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 \
	DEBIAN_FRONTEND=noninteractive "$@"; }

# ---- 1. download -------------------------------------------------------------------

# debootstrap fetches and checks one package at a time, which is slow. apt
# fetches in parallel, so it fills the caches first: the host's apt binary with
# a private state dir (nothing on the host changes) downloads the bootstrap set
# at the versions debootstrap will pick (the plain suite), then the newest
# versions of everything the images need. debootstrap takes its .debs from
# that cache (--cache-dir), and apt in the rootfs reuses its lists and .debs.
phase "download (apt, parallel)"
arch=$(dpkg --print-architecture)
dl=$work/apt
mkdir -p "$dl/lists/partial" "$dl/archives/partial" "$dl/cache" "$dl/empty"
: >"$dl/status"
{
	echo "deb $mirror $SUITE main"
	echo "deb $mirror $SUITE-updates main"
	[[ -z $security_mirror ]] || echo "deb $security_mirror $SUITE-security main"
} >"$dl/sources.list"
# Read first (APT_CONFIG), so the host's apt.conf.d snippets are not loaded.
{
	echo "Dir::Etc::SourceList \"$dl/sources.list\";"
	echo "Dir::Etc::SourceParts \"$dl/empty\";"
	echo "Dir::Etc::Parts \"$dl/empty\";"
	echo "Dir::Etc::Preferences \"$dl/empty/none\";"
	echo "Dir::Etc::PreferencesParts \"$dl/empty\";"
	echo "Dir::State \"$dl\";"
	echo "Dir::State::Lists \"$dl/lists\";"
	echo "Dir::State::status \"$dl/status\";"
	echo "Dir::Cache \"$dl/cache\";"
	echo "Dir::Cache::archives \"$dl/archives\";"
	echo 'Dir::Cache::pkgcache "";'
	echo 'Dir::Cache::srcpkgcache "";'
	echo "APT::Architecture \"$arch\";"
	echo "APT::Architectures { \"$arch\"; };"
	echo 'APT::Install-Recommends "false";'
	echo 'APT::Install-Suggests "false";'
	echo 'Acquire::Languages "none";'
	echo 'Debug::NoLocking "true";'
	printf '%s\n' "${apt_conf[@]}"
} >"$dl/apt.conf"
dl_apt() { APT_CONFIG=$dl/apt.conf "$@"; }

dl_apt apt-get -q update >"$work/download.log" 2>&1 ||
	{ tail -n 30 "$work/download.log" >&2; die "apt-get update against $mirror failed"; }
# minbase = the suite's Priority: required packages + apt, with dependencies.
mapfile -t required < <(dl_apt apt-cache dumpavail |
	awk -v RS= '/(^|\n)Priority: required(\n|$)/ { if (match($0, /(^|\n)Package: [^\n]+/)) {
		p = substr($0, RSTART, RLENGTH); sub(/^\n?Package: /, "", p); print p } }' | sort -u)
((${#required[@]} > 0)) || die "no Priority: required packages in the $SUITE index of $mirror"
dl_apt apt-get -q -y --download-only -o APT::Default-Release="$SUITE" \
	install "${required[@]}" apt >>"$work/download.log" 2>&1 ||
	{ tail -n 30 "$work/download.log" >&2; die "downloading the $SUITE base packages failed"; }
dl_apt apt-get -q -y --download-only \
	install "${required[@]}" apt "${PACKAGES[@]}" >>"$work/download.log" 2>&1 ||
	{ tail -n 30 "$work/download.log" >&2; die "downloading ${PACKAGES[*]} failed"; }
log "cached $(find "$dl/archives" -maxdepth 1 -name '*.deb' | wc -l) packages ($(du -sh "$dl/archives" | cut -f1))"

# ---- 2. bootstrap ------------------------------------------------------------------

phase "debootstrap $SUITE minbase, first stage"
# First stage only unpacks; the dpkg settings below then apply to the second
# stage too (no fsync per file, no docs, man pages or translations).
debootstrap --foreign --variant=minbase --arch="$arch" --cache-dir="$dl/archives" \
	"$SUITE" "$rootfs" "$mirror" >"$work/debootstrap.log" 2>&1 ||
	{ tail -n 30 "$work/debootstrap.log" >&2; die "debootstrap (first stage) failed"; }
fetched=$(grep -c '^I: Retrieving .* [0-9]' "$work/debootstrap.log" || true)
((fetched == 0)) || log "debootstrap fetched $fetched packages itself"

mkdir -p "$rootfs/etc/dpkg/dpkg.cfg.d" "$rootfs/etc/apt/apt.conf.d"
echo force-unsafe-io >"$rootfs/etc/dpkg/dpkg.cfg.d/zz-quorumlock-build"
cat >"$rootfs/etc/dpkg/dpkg.cfg.d/quorumlock-nodoc" <<'NODOC'
# Keep the image small: no documentation, manuals, translations or locale
# sources (C.UTF-8 is built into libc), no LLVM JIT for Postgres (the
# server runs with jit = off; libLLVM and its libz3 are unused), and of
# Prometheus's web assets only what its UI loads (moment-timezone's raw tz
# data, over 200 MB, is unused), and no promtool inside the image.
path-exclude=/usr/share/doc/*
path-include=/usr/share/doc/*/copyright
path-exclude=/usr/share/man/*
path-exclude=/usr/share/info/*
path-exclude=/usr/share/locale/*
path-exclude=/usr/share/lintian/*
path-exclude=/usr/share/i18n/charmaps/*
path-exclude=/usr/share/i18n/locales/*
path-exclude=/usr/lib/*/libLLVM-*
path-exclude=/usr/lib/*/libz3.so*
path-exclude=/usr/lib/postgresql/*/lib/llvmjit*
path-exclude=/usr/lib/postgresql/*/lib/bitcode/*
path-exclude=/usr/share/javascript/moment-timezone/data/*
path-exclude=/usr/bin/promtool
NODOC

phase "debootstrap second stage"
chroot "$rootfs" /debootstrap/debootstrap --second-stage >"$work/debootstrap.log" 2>&1 ||
	{ tail -n 30 "$work/debootstrap.log" >&2; die "debootstrap (second stage) failed"; }

# ---- 3. packages -------------------------------------------------------------------

phase "install ${PACKAGES[*]} (+ $SUITE updates)"
cp "$dl/sources.list" "$rootfs/etc/apt/sources.list"
{
	echo 'APT::Install-Recommends "false";'
	echo 'APT::Install-Suggests "false";'
	echo 'Acquire::Languages "none";'
	printf '%s\n' "${apt_conf[@]}"
} >"$rootfs/etc/apt/apt.conf.d/zz-quorumlock-build"
# Services must not start inside the build.
printf '#!/bin/sh\nexit 101\n' >"$rootfs/usr/sbin/policy-rc.d"
chmod 0755 "$rootfs/usr/sbin/policy-rc.d"
# Postgres gets its own data dir below; the Debian default cluster is not wanted.
mkdir -p "$rootfs/etc/postgresql-common"
echo 'create_main_cluster = false' >"$rootfs/etc/postgresql-common/createcluster.conf"
# The same sources as the download, so its lists and .debs are valid here.
find "$dl/lists" -maxdepth 1 -type f \( -name '*_InRelease' -o -name '*_Release*' -o -name '*_Packages*' \) \
	-exec cp -t "$rootfs/var/lib/apt/lists/" {} +
find "$dl/archives" -maxdepth 1 -name '*.deb' -exec cp -lf -t "$rootfs/var/cache/apt/archives/" {} +

mount -t proc proc "$rootfs/proc"
in_root apt-get -q -y -o Dpkg::Options::=--force-confold dist-upgrade >"$work/apt.log" 2>&1 ||
	{ tail -n 30 "$work/apt.log" >&2; die "apt-get dist-upgrade in the rootfs failed"; }
in_root apt-get -q -y -o Dpkg::Options::=--force-confold install "${PACKAGES[@]}" >>"$work/apt.log" 2>&1 ||
	{ tail -n 30 "$work/apt.log" >&2; die "apt-get install ${PACKAGES[*]} in the rootfs failed"; }
in_root "$PG_BIN/postgres" --version | sed 's/^/[images]   /'
in_root pg_autoctl --version | sed -n '1s/^/[images]   /p'
in_root redis-server --version | sed 's/^/[images]   /'
in_root etcd --version | sed -n '1s/^/[images]   /p'
in_root prometheus --version 2>&1 | sed -n '1s/^/[images]   /p'

# ---- 4. configure ----------------------------------------------------------------

phase "configure (initdb, /data, /var/lib/etcd, /prometheus, trim)"
# Redis: data dir owned by the user redis runs as.
mkdir -p "$rootfs/data"
in_root chown redis:redis /data
chmod 0750 "$rootfs/data"

# etcd: Debian's package creates the etcd user and its home, the data dir's
# parent; the service it ships never runs in a container.
in_root chown etcd:etcd "$ETCD_DATA"
chmod 0700 "$rootfs$ETCD_DATA"

# Prometheus: a TSDB dir owned by the user it runs as (Debian's package
# creates the prometheus user), at the path of the official image.
mkdir -p "$rootfs$PROM_DATA"
in_root chown prometheus:prometheus "$PROM_DATA"
chmod 0750 "$rootfs$PROM_DATA"

# Postgres: a data dir initialised by the postgres user, with a password.
mkdir -p "$rootfs/run/postgresql" "$rootfs$PG_DATA"
in_root chown postgres:postgres /run/postgresql "$PG_DATA"
chmod 2775 "$rootfs/run/postgresql"
pwfile=$(mktemp "$rootfs/tmp/pw.XXXXXX")
printf '%s\n' "$PG_PASSWORD" >"$pwfile"
in_root chown postgres "/tmp/${pwfile##*/}"
in_root runuser -u postgres -- "$PG_BIN/initdb" -D "$PG_DATA" \
	--username="$PG_SUPERUSER" --pwfile="/tmp/${pwfile##*/}" \
	--auth-local=trust --auth-host=scram-sha-256 \
	--encoding=UTF8 --locale=C.UTF-8 >"$work/initdb.log" 2>&1 ||
	{ cat "$work/initdb.log" >&2; die "initdb failed"; }
rm -f "$pwfile"
cat >>"$rootfs$PG_DATA/postgresql.conf" <<'EOF'

# quorumlock image settings
listen_addresses = '*'
port = 5432
unix_socket_directories = '/var/run/postgresql'
dynamic_shared_memory_type = posix
jit = off
EOF
cat >>"$rootfs$PG_DATA/pg_hba.conf" <<'EOF'

# quorumlock image: password (SCRAM) logins from any address
host    all             all             0.0.0.0/0               scram-sha-256
host    all             all             ::/0                    scram-sha-256
EOF
echo "CREATE DATABASE $PG_DATABASE;" |
	in_root runuser -u postgres -- "$PG_BIN/postgres" --single -D "$PG_DATA" \
		-c exit_on_error=true -c jit=off -c dynamic_shared_memory_type=sysv postgres >"$work/single.log" 2>&1 ||
	{ cat "$work/single.log" >&2; die "CREATE DATABASE $PG_DATABASE failed"; }

# Trim: build-only settings, apt lists and caches, docs, logs, host files.
umount "$rootfs/proc"
rm -f "$rootfs/usr/sbin/policy-rc.d" \
	"$rootfs/etc/dpkg/dpkg.cfg.d/zz-quorumlock-build" \
	"$rootfs/etc/apt/apt.conf.d/zz-quorumlock-build" \
	"$rootfs/etc/ssl/private/ssl-cert-snakeoil.key" \
	"$rootfs/etc/ssl/certs/ssl-cert-snakeoil.pem"
echo 'Acquire::Languages "none";' >"$rootfs/etc/apt/apt.conf.d/docker-no-languages"
rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/* \
	"$rootfs"/var/cache/debconf/*-old "$rootfs"/var/lib/dpkg/*-old \
	"$rootfs"/var/log/* "$rootfs"/tmp/* "$rootfs"/var/tmp/* "$rootfs"/root/.[!.]* \
	"$rootfs"/usr/share/man/* "$rootfs"/usr/share/info/* "$rootfs"/usr/share/locale/* \
	"$rootfs"/usr/share/lintian/*
find "$rootfs/usr/share/doc" -mindepth 1 -not -name copyright -not -type d -delete 2>/dev/null || true
find "$rootfs/usr/share/doc" -mindepth 1 -type d -empty -delete 2>/dev/null || true
: >"$rootfs/etc/resolv.conf"
: >"$rootfs/etc/hostname"
rm -f "$rootfs/etc/machine-id" "$rootfs/var/lib/dbus/machine-id"
log "rootfs: $(du -sh --one-file-system "$rootfs" | cut -f1)"

# ---- 5. import -------------------------------------------------------------------

# import IMAGE CHANGE... : the same tree each time, so the layer is shared.
import() {
	local image=$1 args=() c
	shift
	for c in "$@"; do args+=(--change "$c"); done
	tar -C "$rootfs" --numeric-owner --one-file-system \
		--exclude='./dev/*' --exclude='./proc/*' --exclude='./sys/*' -cf - . |
		docker import "${args[@]}" - "$image" >/dev/null
	log "imported $image ($(docker image inspect --format '{{.Size}}' "$image" | awk '{ printf "%.0f MB", $1 / 1e6 }'))"
}

phase "docker import"
# Images these tags name now (--force); removed below once nothing uses them.
mapfile -t old_ids < <(docker image inspect --format '{{.Id}}' "${IMAGES[@]}" 2>/dev/null | sort -u)
import "$REDIS_IMAGE" \
	'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
	'ENV LANG=C.UTF-8' \
	'USER redis' \
	'WORKDIR /data' \
	'EXPOSE 6379' \
	'CMD ["redis-server", "--bind", "0.0.0.0", "--protected-mode", "no", "--port", "6379", "--dir", "/data"]'
# Shaped like the upstream etcd images: the binary as the entrypoint (the
# test bed passes its own flags), here with a single-member default.
import "$ETCD_IMAGE" \
	'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
	'ENV LANG=C.UTF-8' \
	'USER etcd' \
	"WORKDIR $ETCD_DATA" \
	'EXPOSE 2379 2380' \
	'ENTRYPOINT ["/usr/bin/etcd"]' \
	"CMD [\"--data-dir=$ETCD_DATA/default\", \"--listen-client-urls=http://0.0.0.0:2379\", \"--advertise-client-urls=http://127.0.0.1:2379\", \"--logger=zap\"]"
import "$POSTGRES_IMAGE" \
	"ENV PATH=$PG_BIN:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
	'ENV LANG=C.UTF-8' \
	"ENV PGDATA=$PG_DATA" \
	'USER postgres' \
	'WORKDIR /var/lib/postgresql' \
	'EXPOSE 5432' \
	"CMD [\"$PG_BIN/postgres\", \"-D\", \"$PG_DATA\"]"
# Shaped like prom/prometheus: the binary as the entrypoint, flags as the
# command, the TSDB in /prometheus.
import "$PROMETHEUS_IMAGE" \
	'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
	'ENV LANG=C.UTF-8' \
	'USER prometheus' \
	"WORKDIR $PROM_DATA" \
	'EXPOSE 9090' \
	'ENTRYPOINT ["/usr/bin/prometheus"]' \
	"CMD [\"--config.file=/etc/prometheus/prometheus.yml\", \"--storage.tsdb.path=$PROM_DATA\"]"
new_ids=" $(docker image inspect --format '{{.Id}}' "${IMAGES[@]}" | tr '\n' ' ')"
for id in "${old_ids[@]}"; do
	[[ -z $id || $new_ids == *" $id "* ]] && continue
	if docker image rm "$id" >/dev/null 2>&1; then
		log "removed the replaced image ${id#sha256:}"
	else
		log "kept the replaced image ${id#sha256:} (still in use)"
	fi
done
phase_end

total_ms=$((($(date +%s%N) - build_start) / 1000000))
log "built ${IMAGES[*]} in $((total_ms / 1000)).$(printf '%03d' $((total_ms % 1000)))s"
