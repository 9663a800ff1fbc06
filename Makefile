# GridFS Serving Lab: the two entry points are `make lab-local` (or `make lab`
# with a registry) and `make test`. Each sets up what it needs first.
SHELL := /bin/bash
# Fewer than 4 cores: layer the 2-core pins over the image settings.
PINS := $(if $(shell [ $$(nproc) -lt 4 ] && echo small),--env-file cpus-2.env)
COMPOSE_OFFICIAL := docker compose --env-file .env $(PINS)
# local.env has the 2-core pins already where the machine needs them.
COMPOSE_LOCAL := docker compose --env-file local.env
PYTEST_ARGS ?=
# The Go toolchain tools/install/install-go.sh chose (for make test's go test).
export PATH := $(or $(LAB_CACHE),/var/cache/gridfs-lab)/go/bin:$(PATH)

.PHONY: setup setup-tests venv check local-images lab lab-local lab-hosts ab ab-calibrate matrix resilience overload \
	new-path test test-native floor clean

setup:
	tools/install/setup.sh

# What only the tests need besides: native servers and clients, Chromium,
# FerretDB's binary, vegeta, actionlint, pytest. make lab installs none of it.
setup-tests:
	tools/install/setup.sh --tests

# The tests' virtualenv alone (no root, no Docker): all make check needs.
venv:
	tools/install/venv.sh

# The one-minute tier (docs/ci.md): ruff, shellcheck, gofmt and go vet, node
# --check and the unit tests (pytest -m unit); a checker not installed is
# skipped with a line saying so.
check: venv
	tools/ci/check.sh

# Images from Debian packages for machines with no container registry;
# writes local.env (.env with every image variable pointed at them).
local-images: setup
	local-images/build.sh

# --exit-code-from: plain `up` exits 0 whatever bench's status was. The
# settings check first on its own, so a bad variable's line shows here (`up`
# runs it again, silently, as a dependency; attaching to it there would end
# the run when it exits). bench runs as RESULTS_OWNER: tools/lab/results-owner.sh
# gives your own ids (as root: .env's, with results/ handed to them).
# The lab on official images (needs a registry).
lab: setup
	owner=$$(tools/lab/results-owner.sh .env) && export RESULTS_OWNER=$$owner \
	  && $(COMPOSE_OFFICIAL) run --rm --build settings \
	  && $(COMPOSE_OFFICIAL) up --build --exit-code-from bench bench

# The lab on local images (this machine, CI).
lab-local: local-images
	owner=$$(tools/lab/results-owner.sh local.env) && export RESULTS_OWNER=$$owner \
	  && $(COMPOSE_LOCAL) run --rm --build settings \
	  && $(COMPOSE_LOCAL) up --build --exit-code-from bench bench

# Did one change make a path faster or slower? A twin of SERVICE with the
# change, timed against it in interleaved blocks in one run (tools/lab/change.py):
# make ab SERVICE=flask B_IMAGE=python:3.13-slim (or B_CONTEXT=dir, B_REF=main,
# B_CPUS=0.8, B_ENV="GUNICORN_WORKERS=2"; none: an A/A calibration).
ab: local-images
	.venv/bin/python tools/lab/change.py

# How far an A/B run's verdicts hold on this machine: AB_CALIBRATION_RUNS A/A
# runs of SERVICE (default 20, one after another, at the A/B settings), then
# per case and metric the p-values' uniformity (KS, QQ table), Cochran's Q and
# I², the between-run sd and the false alarms with their Clopper-Pearson bound:
# make ab-calibrate SERVICE=flask AB_CALIBRATION_RUNS=20 (tools/lab/change_calibrate.py)
ab-calibrate: local-images
	.venv/bin/python tools/lab/change_calibrate.py

# One run per value of one setting on local images, then one table across
# them: make matrix VAR=GUNICORN_WORKERS VALUES="1 2" (tools/lab/matrix.py).
matrix: local-images
	.venv/bin/python tools/lab/matrix.py "$(VAR)" $(VALUES)

# Each path with a database under steady load while that database restarts,
# then pauses: errors, answers during the outage, time back to good answers
# (tools/lab/resilience.py; RESILIENCE_ENV_FILE=.env for official images).
resilience: local-images
	.venv/bin/python tools/lab/resilience.py

# Each path under 1000 clients, then serving a 100 MB file to 50 clients in a
# 256 MB limit: OOM kills, answers cut short, peak memory against the limit
# (tools/lab/overload.py; OVERLOAD_ENV_FILE=.env for official images).
overload: local-images
	.venv/bin/python tools/lab/overload.py

# The lab split over several Docker engines by role, each named by a Docker
# context or a DOCKER_HOST URL with its address on the link (tools/lab/hosts.py):
# make lab-hosts LAB_HOSTS="loadgen=default@10.0.0.1 paths=b@10.0.0.2 db=b@10.0.0.2"
lab-hosts: local-images
	.venv/bin/python tools/lab/hosts.py

# A new serving path as a copy of an existing one: its folder, its compose
# service (in bench's depends_on) and its BENCH_TARGETS word (tools/lab/new_path.py):
# make new-path NAME=my-path FROM=flask; the contract: docs/adding-a-path.md
new-path:
	python3 tools/lab/new_path.py "$(NAME)" "$(FROM)"

# Every test, including the compose end-to-end run on local images; first the
# FUSE filesystem's Go unit tests (chunk arithmetic, names).
test: setup-tests local-images
	cd services/gridfs-fuse && timeout 900 go test ./...
	.venv/bin/pytest tests -m "not bench" $(PYTEST_ARGS)

# The benchmarks that print figures and assert no speed (the nginx module's
# CPU per request against its floor, with its perf profile; its peak memory
# with slow clients and the database's CPU per request, tests/test_nginx_gridfs_bench.py).
floor: setup-tests
	.venv/bin/pytest -m bench -s tests $(PYTEST_ARGS)

# The tests on native servers and tools alone (PostgreSQL, FerretDB, nginx,
# FUSE, Chromium...): no Docker, no local images.
test-native: setup-tests
	.venv/bin/pytest -m native $(PYTEST_ARGS)

# local.env where local images were built, else .env: the same project and volumes.
clean:
	$(if $(wildcard local.env),$(COMPOSE_LOCAL),$(COMPOSE_OFFICIAL)) down -v --remove-orphans
