# Leaderboard service: `make demo` runs the main job, `make test` runs the tests.
# Each target installs what it needs on first use and works offline afterwards.

SHELL := /bin/bash
.DEFAULT_GOAL := help

VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
CACHE ?= .cache
STAMP := $(VENV)/.installed
JARS_STAMP := $(CACHE)/jars/.fetched
# Airflow lives in its own venv: its dependency tree pins the web stack for its own UI.
AIRFLOW_VENV ?= .venv-airflow
AIRFLOW_STAMP := $(AIRFLOW_VENV)/.installed
PYTEST_ARGS ?=
# make test's workers: each runs one of two Spark groups (a JVM each, the Spark
# modules spread by their measured seconds), then the rest wherever one is free
# (tests/support/groups.py); TEST_WORKERS= runs them in this one process.
TEST_WORKERS ?= -n 2 --dist loadgroup

help: ## list the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  \033[36m%-14s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	$(PIP) install --quiet -e '.[test]'
	touch $@

venv: $(STAMP) ## create the virtual environment and install the project

$(AIRFLOW_STAMP): pyproject.toml
	python3 -m venv $(AIRFLOW_VENV)
	$(AIRFLOW_VENV)/bin/pip install --quiet --upgrade pip
	$(AIRFLOW_VENV)/bin/pip install --quiet -e '.[airflow]'
	touch $@

# Its own pyspark: its own class-data archive for the DAG tasks' Spark drivers.
airflow-venv: $(AIRFLOW_STAMP) redis jars ## install Airflow 3 and the project into .venv-airflow
	$(AIRFLOW_VENV)/bin/python -m cli.class_archive

LOADTEST_STAMP := $(VENV)/.loadtest-installed

$(LOADTEST_STAMP): $(STAMP)
	$(PIP) install --quiet -e '.[loadtest]'
	touch $@

promtool: ## install Debian's prometheus (for promtool) when it is missing
	@command -v promtool >/dev/null 2>&1 || { \
	  echo "installing prometheus (promtool) from Debian's packages"; \
	  export DEBIAN_FRONTEND=noninteractive; \
	  apt-get update -qq && apt-get install -y -qq --no-install-recommends prometheus >/dev/null; \
	  systemctl disable --now prometheus >/dev/null 2>&1 || service prometheus stop >/dev/null 2>&1 || true; }

redis: ## install Debian's redis-server when it is missing
	@command -v redis-server >/dev/null 2>&1 || { \
	  echo "installing redis-server from Debian's packages"; \
	  export DEBIAN_FRONTEND=noninteractive; \
	  apt-get update -qq && apt-get install -y -qq --no-install-recommends redis-server >/dev/null; \
	  systemctl disable --now redis-server >/dev/null 2>&1 || service redis-server stop >/dev/null 2>&1 || true; }

chromium: ## install Debian's chromium (for the page's browser test) when it is missing
	@command -v chromium >/dev/null 2>&1 || { \
	  echo "installing chromium from Debian's packages"; \
	  export DEBIAN_FRONTEND=noninteractive; \
	  apt-get update -qq && apt-get install -y -qq --no-install-recommends chromium >/dev/null; }

$(JARS_STAMP): $(STAMP) jobs/jars.py
	$(PY) -m jobs.jars --fetch
	touch $@

jars: $(JARS_STAMP) ## fetch Delta Lake's Spark jars from Maven Central into .cache/jars

class-archive: venv redis jars ## write the Spark driver's class-data archive into .cache/cds (a small publish pair, 1.5-3 minutes; a no-op once written)
	$(PY) -m cli.class_archive

setup: venv redis jars class-archive ## everything the demo needs

demo: setup ## run the main job (lb demo) on embedded defaults
	$(VENV)/bin/lb demo

test: setup chromium airflow-venv promtool ## run the test suite (SLOW=1 includes slow tests)
	LB_REQUIRE_OPS_TOOLS=1 LB_AIRFLOW_VENV=$(abspath $(AIRFLOW_VENV)) $(VENV)/bin/pytest -m "$(if $(SLOW),not drills,not slow and not drills)" $(TEST_WORKERS) --durations=25 $(PYTEST_ARGS)

drills: setup ## fault drills on real stacks: kill -9 of Redis and the API (healed; a Redis outage with its AOF held; the restart budget), the Spark JVM per publish phase, a full disk, a stalled Redis; the publish on a Spark standalone cluster (a few minutes)
	$(VENV)/bin/pytest -m drills tests/drills $(PYTEST_ARGS)

bench: setup ## ingest benchmark and the naive MVP yardstick in the same run (prints ours / naive; figures in bench/RESULTS.md)
	$(PY) -m bench.ingest

bench-games: setup ## ingest with two games against one, alternating rounds on two stacks up at once (issue 26: within 5 %)
	$(PY) -m bench.ingest_games $(BENCH_ARGS)

bench-reads: setup ## read benchmark (issue 13 shape: make bench-reads BENCH_ARGS="--players 1000000 --publish direct"; a chain of 5 layers vs compacted: add "--layers 5 --compare-compacted")
	$(PY) -m bench.reads $(BENCH_ARGS)

SOAK_ARGS ?=

soak: setup ## 10-minute soak (writes, reads, publishes; memory over time, oracle check at the end; not in CI): make soak SOAK_ARGS="--seconds 60"
	$(PY) -m bench.soak $(SOAK_ARGS)

# Issue 12's headline shapes: 1 M players / 10 M events full, then 100 k new events
# incremental over them, with a 2 GiB driver (bench/publish.py has a smaller example).
BENCH_PUBLISH_ARGS ?= --players 1000000 --events 10000000 --incremental-events 100000
BENCH_DRIVER_MEMORY ?= 2g

bench-publish: setup ## publish benchmark with the DuckDB reference (BENCH_PUBLISH_ARGS=...)
	LB_SPARK_DRIVER_MEMORY=$(BENCH_DRIVER_MEMORY) $(PY) -m bench.publish $(BENCH_PUBLISH_ARGS)

# The load test against any deployment: make loadtest HOST=http://10.0.0.5:8080 USERS=50
HOST ?= http://127.0.0.1:8080
USERS ?= 20
SPAWN_RATE ?= 10
RUN_TIME ?= 60s
LOADTEST_ARGS ?=

loadtest: $(LOADTEST_STAMP) ## Locust, headless, against HOST (USERS, RUN_TIME, LOADTEST_ARGS="--lb-key id:secret ..."); ends with the exactly-once check
	PYTHONPATH=$(CURDIR)/clients/python/src $(VENV)/bin/locust -f bench/locustfile.py \
	  --headless --host $(HOST) --users $(USERS) --spawn-rate $(SPAWN_RATE) \
	  --run-time $(RUN_TIME) --only-summary $(LOADTEST_ARGS)

CLUSTER_DEMO_ARGS ?=

cluster-demo: setup airflow-venv ## the whole service on Spark standalone (2 workers), a 3-master Redis Cluster, two APIs and Airflow standalone: a short season through the DAGs, checked, then stopped (~12 min)
	LB_AIRFLOW_VENV=$(abspath $(AIRFLOW_VENV)) $(PY) -m cli.cluster_demo $(CLUSTER_DEMO_ARGS)

airflow: setup airflow-venv ## Airflow standalone with dags/ on SQLite under LB_DATA_DIR/airflow (UI on AIRFLOW_PORT, default 8081)
	@set -e; data="$${LB_DATA_DIR:-.lb}"; mkdir -p "$$data/airflow"; \
	export LB_DATA_DIR="$$(cd "$$data" && pwd)"; \
	export AIRFLOW_HOME="$$LB_DATA_DIR/airflow"; \
	export AIRFLOW__CORE__DAGS_FOLDER="$(CURDIR)/dags"; \
	export AIRFLOW__CORE__LOAD_EXAMPLES=False; \
	export AIRFLOW__DATABASE__SQL_ALCHEMY_CONN="sqlite:///$$AIRFLOW_HOME/airflow.db"; \
	export AIRFLOW__API__PORT="$${AIRFLOW_PORT:-8081}"; \
	export AIRFLOW__CORE__EXECUTION_API_SERVER_URL="http://localhost:$$AIRFLOW__API__PORT/execution/"; \
	export PATH="$(abspath $(AIRFLOW_VENV))/bin:$$PATH"; \
	echo "Airflow UI: http://localhost:$$AIRFLOW__API__PORT (user admin, password in $$AIRFLOW_HOME/simple_auth_manager_passwords.json.generated)"; \
	exec $(abspath $(AIRFLOW_VENV))/bin/airflow standalone

lint: venv ## ruff (check and format) and mypy
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy speed api jobs conf cli serving
	$(VENV)/bin/mypy --strict clients/python/src

clean: ## remove local data (.lb), keep the venv and the jar cache
	rm -rf .lb

.PHONY: class-archive cluster-demo loadtest drills help venv airflow-venv promtool airflow redis chromium jars setup demo test bench bench-games bench-reads bench-publish soak lint clean
