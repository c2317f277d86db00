# quorumlock: `make demo` runs the main job, `make test` runs every test.
SHELL := /bin/bash
GO ?= go

# The reaper image cannot be pulled on machines without a registry; the test
# bed removes its own containers.
export TESTCONTAINERS_RYUK_DISABLED := true
# Images built by `make images` from Debian packages.
export QUORUMLOCK_REDIS_IMAGE ?= quorumlock/redis:bookworm
export QUORUMLOCK_POSTGRES_IMAGE ?= quorumlock/postgres:bookworm
# docker, local or auto (docker when the engine answers and the images exist).
export QUORUMLOCK_TESTBED ?= auto

STATICCHECK_VERSION := v0.8.2
APIDIFF_VERSION := v0.0.0-20261113113407-e3970619a1a4
# The packages whose exported API is promised (CONTRIBUTING.md, "The public
# API"); their baselines are api/<pkg>.export.
API_PACKAGES := quorum etcdlock fencing lease
GOBIN := $(shell $(GO) env GOPATH)/bin

.PHONY: help deps images lint api-baseline api-report test test-go test-build bench lockbench orderbench chaos fuzz demo demo-ha build up down compose-up compose-down clean

help:
	@echo "make demo    run the main job on a test bed (docker when the images exist, else local processes; installs redis-server and postgresql only)"
	@echo "make demo-ha the double-click story on a Postgres HA group (pg_auto_failover, local processes), the primary killed in its middle"
	@echo "make test    every test: lint, then every package once on the bed's provider (with -race where it finds something), a short row of the other provider, the package times"
	@echo "make images  build the local Redis, Postgres, Prometheus and etcd images from Debian packages"
	@echo "make deps    install redis-server, postgresql, etcd-server, debootstrap, promtool (prometheus) and, where docker is, docker-compose when missing"
	@echo "make bench   the benchmarks"
	@echo "make lockbench  every lock contender in every scenario, side by side (tables, JSON, plot)"
	@echo "make orderbench POST /orders on three instances, with the quorum lock and with Postgres alone"
	@echo "make chaos   every fault scenario on both locks, with and without the fence, each on 3 seeds (60 minutes at most); writes docs/SAFETY.md; then the event flood at full size"
	@echo "make api-baseline  record the exported API of $(API_PACKAGES) in api/, which make lint compares against"
	@echo "make fuzz    run each fuzz target for a while"
	@echo "make up      the docker-compose stack (5 masters, Postgres, 3 ordersd, fakepay, Prometheus on 127.0.0.1:19090); waits until every service is healthy"
	@echo "make down    stop the stack and remove its volumes (compose-up / compose-down: aliases of up / down)"

deps:
	@bash scripts/deps.sh

# Builds the images when a Docker engine answers; without one the docker
# provider is simply not available and the bed uses local processes.
images: deps
	@if docker info >/dev/null 2>&1; then \
		bash compose/images/build.sh; \
	else \
		echo "images: no Docker engine answers; skipping (the local provider will be used)"; \
	fi

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
		if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	@test -x $(GOBIN)/staticcheck || $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)
	$(GOBIN)/staticcheck ./...
	@test -x $(GOBIN)/apidiff || $(GO) install golang.org/x/exp/cmd/apidiff@$(APIDIFF_VERSION)
	API_PACKAGES="$(API_PACKAGES)" APIDIFF=$(GOBIN)/apidiff bash scripts/apicheck.sh check
	APIDIFF=$(GOBIN)/apidiff bash scripts/apicheck_test.sh
	bash scripts/readme_test.sh
	$(GO) run scripts/funclen.go

# Rewrites the API baselines from the code as it is: run when a version is
# tagged (CONTRIBUTING.md, "The public API").
api-baseline:
	@test -x $(GOBIN)/apidiff || $(GO) install golang.org/x/exp/cmd/apidiff@$(APIDIFF_VERSION)
	API_PACKAGES="$(API_PACKAGES)" APIDIFF=$(GOBIN)/apidiff bash scripts/apicheck.sh baseline

# Prints the incompatible changes against the baselines as draft CHANGELOG lines.
api-report:
	@test -x $(GOBIN)/apidiff || $(GO) install golang.org/x/exp/cmd/apidiff@$(APIDIFF_VERSION)
	@API_PACKAGES="$(API_PACKAGES)" APIDIFF=$(GOBIN)/apidiff bash scripts/apicheck.sh report

# The packages of `make test-go`, in two lists that together hold every
# package once (scripts/gotest.sh checks it), each list's slowest packages
# first so that go test starts them first. README.md ("What runs where")
# says why each package is where it is.
# With the race detector: the packages with concurrency of their own
# (quorum's node workers and watchdog, etcdlock's sessions, the orders
# placement combiner and the services built on it, the bed's proxies and
# processes, quorumctl's and the shipper's fan-outs) and the libraries
# they use.
RACE_PKGS := ./quorum/... ./orders/ ./orders/store/ ./etcdlock/... ./devtools/testbed/... \
	./orders/... ./fencing/... ./devtools/nemesis/... ./cmd/quorumctl/ ./cmd/shipper/ \
	./lease/... ./internal/... ./devtools/chaos/... ./devtools/checker/... ./devtools/fakepay/... \
	./devtools/audit/... ./devtools/locktest/... ./devtools/storetest/... ./devtools/blackhole/...
# Without it: the packages whose tests spend their time waiting on servers
# and processes (the end-to-end suites, the commands, the compose stack,
# the alert rules).
PLAIN_PKGS := ./integration/... ./compose/... ./devtools/cmd/... ./cmd/ordersd/ ./deploy/... \
	./devtools/countersem/...
# But for these tests of integration, which run with -race in a run of
# their own: the short chaos suite, whose workers are this test binary
# (the race detector caught a data race in them there), and the lock
# under the nemesis, four workers on one Locker in the test's process.
RACE_SUBSET := ./integration/
RACE_RUN := ^(TestChaosShort|TestLockUnderFaults)$$
# How many packages each of the runs tests at once (the runs go on at the
# same time).
TEST_P ?= 2

# Every package once, on the bed chosen by QUORUMLOCK_TESTBED: RACE_PKGS
# with -race, PLAIN_PKGS without (RACE_RUN of RACE_SUBSET with -race), at
# the same time; then the time of every package, slowest first (bin/test/
# keeps the go test -json streams). integration's TestProviders keeps a
# short row of each provider.
test-go:
	@GO=$(GO) RACE_PKGS="$(RACE_PKGS)" PLAIN_PKGS="$(PLAIN_PKGS)" RACE_SUBSET="$(RACE_SUBSET)" \
		RACE_RUN='$(RACE_RUN)' TEST_P=$(TEST_P) bash scripts/gotest.sh

# Compiles, while the images build and lint runs, what the tests would
# compile under way: the race run's packages, ordersd and the shipper with
# their failpoints (integration's drills build them) and the binaries of
# the compose stack (compose/smoke builds them with CGO_ENABLED=0). go vet
# compiles the rest.
test-build:
	$(GO) build -race $(RACE_PKGS)
	$(GO) build -tags failpoints ./cmd/ordersd ./cmd/shipper
	CGO_ENABLED=0 $(GO) build ./cmd/ordersd ./devtools/cmd/fakepay ./cmd/shipper

# The images, lint and the race build at the same time (each one's output
# printed when it ends), then the tests.
test: deps
	@s=$$(date +%s) && $(MAKE) --no-print-directory -j3 --output-sync=target images lint test-build && \
		echo "test: images, lint and the race build took $$(( $$(date +%s) - s ))s"
	@$(MAKE) --no-print-directory test-go

bench: images
	$(GO) test -run '^$$' -bench . -benchmem -count 1 ./...

lockbench: images
	$(GO) run ./devtools/cmd/lockbench -json lockbench.json -plot lockbench.png

orderbench: images
	$(GO) run ./devtools/cmd/orderbench

# Every chaos scenario on both locks, fenced and unfenced, each on 3 seeds (seed + 0..2),
# bounded to 60 minutes; writes
# docs/SAFETY.md. The short suite runs inside `make test` (TestChaosShort, one
# round a row). Then the long sizes of integration's suites that `make test`
# runs short (-tags chaos, integration/long_on_test.go): the event flood at
# 10,000 events and 1,000 copies; the Postgres failover rows with every
# fault on 3 seeds, every fault on the standby and the monitor, and their
# asynchronous negative control.
chaos: images
	$(GO) run ./devtools/cmd/chaos -repeat 3 -timeout 60m -out docs/SAFETY.md
	$(GO) test -tags chaos -count=1 -timeout 40m -run 'TestEvents$$/^Flood$$|TestPostgresFailover|TestPostgresHAMembers|TestPostgresAsyncLosesOrders' ./integration/
	$(GO) test -tags chaos -count=1 -timeout 10m -run 'TestPostgresHAPartition' ./devtools/testbed/

fuzz:
	@for pkg in $$($(GO) list ./...); do \
		for f in $$($(GO) test -list '^Fuzz' $$pkg 2>/dev/null | grep '^Fuzz'); do \
			echo "fuzz $$pkg $$f"; $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime 20s $$pkg || exit 1; \
		done; \
	done

build:
	$(GO) build ./...

# The demo installs only what it needs (redis-server and PostgreSQL when it
# runs on local processes) and builds no image: see scripts/demo.sh.
demo:
	@GO=$(GO) bash scripts/demo.sh

# The demo's double-click story on a Postgres HA group, the primary killed
# in its middle (quorumbed demo --ha). The group runs on local processes
# only, so the binaries are built as the demo builds them for those
# (-tags noetcd,nodocker); it needs redis-server and PostgreSQL
# (scripts/deps.sh demo installs them) and pg_autoctl (make deps).
demo-ha:
	@bash scripts/deps.sh demo-ha
	@echo "demo-ha: building ordersd and quorumbed (provider: local)"
	$(GO) build -tags noetcd,nodocker -o bin/ ./cmd/ordersd ./devtools/cmd/quorumbed
	QUORUMLOCK_TESTBED=local bin/quorumbed demo --ha -ordersd bin/ordersd

# The stack of compose/docker-compose.yml (project "quorumlock", from
# compose/.env), healthy or a report of what is not; compose/README.md.
up: images
	CGO_ENABLED=0 $(GO) build -o compose/bin/ordersd ./cmd/ordersd
	CGO_ENABLED=0 $(GO) build -o compose/bin/fakepay ./devtools/cmd/fakepay
	CGO_ENABLED=0 $(GO) build -o compose/bin/shipper ./cmd/shipper
	cd compose && docker-compose up -d --build
	@bash compose/wait-healthy.sh

down:
	cd compose && docker-compose down -v

compose-up: up
compose-down: down

clean:
	rm -rf compose/bin bin
