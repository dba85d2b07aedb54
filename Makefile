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
PYTEST_ARGS ?=

help: ## list the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  \033[36m%-14s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(PIP) install --quiet --upgrade pip
	$(PIP) install --quiet -e '.[test]'
	touch $@

venv: $(STAMP) ## create the virtual environment and install the project

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

setup: venv redis jars ## everything the demo and the tests need

demo: setup ## run the main job (lb demo) on embedded defaults
	$(VENV)/bin/lb demo

test: setup chromium ## run the test suite (SLOW=1 includes slow tests)
	$(VENV)/bin/pytest $(if $(SLOW),,-m "not slow") $(PYTEST_ARGS)

bench: setup ## ingest benchmark (bench/RESULTS.md has every recorded run)
	$(PY) -m bench.ingest

bench-reads: setup ## read benchmark: snapshot, live, approx, Redis bytes, segment bytes
	$(PY) -m bench.reads

bench-publish: setup ## publish benchmark with the DuckDB reference
	$(PY) -m bench.publish

lint: venv ## ruff and mypy
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy speed api jobs conf cli

clean: ## remove local data (.lb), keep the venv and the jar cache
	rm -rf .lb

.PHONY: help venv redis chromium jars setup demo test bench bench-reads bench-publish lint clean
