# One command sets up a fresh Debian 12 machine and runs every check: `make test`.
# Recipes run as one bash script each (.ONESHELL), failing on the first error. Tools run as
# `python -m TOOL`: a freshly pip-installed script may not be on PATH yet (pyenv shims).

SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
.ONESHELL:
.DEFAULT_GOAL := test

# Everything runs in the project's own virtualenv, created without system site-packages, so an
# undeclared dependency fails here as it would on a user's machine.
BASE_PYTHON ?= python3
VENV ?= .venv
PYTHON := $(VENV)/bin/python
# rustup installs cargo here; pip needs it to build the optional native row encoder.
export PATH := $(HOME)/.cargo/bin:$(PATH)
MVN ?= mvn -B -q --no-transfer-progress -Dstyle.color=never
PYTEST_ARGS ?=

KAFKA_LIB := tests/kafka/target/lib
MONGO_LIB := tests/mongo/target/lib
MONGO_SOURCES := $(shell find tests/mongo/src -name '*.java' 2>/dev/null)

.PHONY: install apt venv pip jars test lint typecheck pytest kafka demo clean

## install: system packages (only what is missing), the project's virtualenv with the package, the
## Kafka and Mongo jars.
install: apt pip jars

## apt: PostgreSQL 15, Redis, kcat, Maven and a JDK 17, each only when missing.
apt:
	@missing=()
	ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || missing+=(postgresql-15)
	command -v redis-server >/dev/null || missing+=(redis-server)
	command -v kcat >/dev/null || command -v kafkacat >/dev/null || missing+=(kcat)
	command -v mvn >/dev/null || missing+=(maven)
	# Maven compiles the Mongo server's main class, so a JRE alone is not enough.
	command -v javac >/dev/null || missing+=(openjdk-17-jdk-headless)
	# A distribution Python needs python3-venv for `-m venv` (ensurepip); pyenv's has it built in.
	$(BASE_PYTHON) -c 'import ensurepip, venv' >/dev/null 2>&1 || missing+=(python3-venv)
	if [ $${#missing[@]} -eq 0 ]; then echo "apt: nothing missing"; exit 0; fi
	sudo=""; [ "$$(id -u)" -eq 0 ] || sudo="sudo"
	echo "apt: installing $${missing[*]}"
	$$sudo apt-get update -q
	# Debian 12 names the server postgresql-15; elsewhere fall back to the distribution default.
	if [[ " $${missing[*]} " == *" postgresql-15 "* ]] && ! apt-cache show postgresql-15 >/dev/null 2>&1; then
	  missing=("$${missing[@]/postgresql-15/postgresql}")
	fi
	DEBIAN_FRONTEND=noninteractive $$sudo apt-get install -y -q --no-install-recommends "$${missing[@]}"

## pip: the project in editable mode with its dev tools, and the native row encoder when a Rust
## toolchain is present (again only when pyproject.toml or the encoder changed).
NATIVE_SOURCES := $(wildcard connectors/postgres/native/src/*.rs cdc/log/native/src/*.rs) connectors/postgres/native/Cargo.toml cdc/log/native/Cargo.toml
venv: $(PYTHON)
$(PYTHON):
	$(BASE_PYTHON) -m venv --clear $(VENV)
	$(PYTHON) -m pip install -q --upgrade pip

pip: $(VENV)/.installed
$(VENV)/.installed: pyproject.toml $(NATIVE_SOURCES) | $(PYTHON)
	PIP_ROOT_USER_ACTION=ignore $(PYTHON) -m pip install -q -e '.[dev]'
	$(PYTHON) -c 'from connectors.postgres import fast; print("native row encoder:", "built" if fast.available() else "not built (no Rust toolchain): the pure-Python path runs")'
	$(PYTHON) -c 'from cdc.log import embedded_native as n; print("native log appender:", "built" if n.available() else "not built (no Rust toolchain): executemany runs")'
	touch $@

## jars: Kafka 4 and mongo-java-server with their dependencies, from Maven Central.
jars: $(KAFKA_LIB)/.built $(MONGO_LIB)/.built
$(KAFKA_LIB)/.built: tests/kafka/pom.xml
	rm -rf $(KAFKA_LIB)
	(cd tests/kafka && $(MVN) package)
	touch $@
$(MONGO_LIB)/.built: tests/mongo/pom.xml $(MONGO_SOURCES)
	rm -rf $(MONGO_LIB)
	(cd tests/mongo && $(MVN) package)
	touch $@

## test: lint, format check, type check and the whole test suite; fails if any of them fails.
test: install
	@failed=()
	$(MAKE) --no-print-directory lint || failed+=(lint)
	$(MAKE) --no-print-directory typecheck || failed+=(mypy)
	$(MAKE) --no-print-directory pytest || failed+=(pytest)
	if [ $${#failed[@]} -ne 0 ]; then echo "make test: FAILED: $${failed[*]}" >&2; exit 1; fi
	echo "make test: all checks passed"

lint:
	@rc=0
	$(PYTHON) -m ruff check . || rc=1
	$(PYTHON) -m ruff format --check . || rc=1
	exit $$rc

typecheck:
	$(PYTHON) -m mypy

# importlib import mode: test files may share a basename across tests/unit, tests/integration
# and tests/e2e whether or not those folders have an __init__.py.
pytest:
	@# Exit 5 means no test ran: a broken collection, never a pass.
	rc=0
	$(PYTHON) -m pytest -q -p no:cacheprovider --import-mode=importlib -ra --durations=20 \
	  $(PYTEST_ARGS) || rc=$$?
	if [ $$rc -eq 5 ]; then echo "pytest: no tests were collected" >&2; fi
	exit $$rc

## kafka: a local single-node Kafka broker in the foreground (Ctrl-C stops it).
kafka: jars
	$(PYTHON) -m tests.services.kafka

## demo: the end-to-end demo (examples/demo.py): throwaway PostgreSQL and Redis, three sinks.
demo: install
	$(PYTHON) examples/demo.py

clean:
	rm -rf build $(VENV) tests/kafka/target tests/mongo/target
