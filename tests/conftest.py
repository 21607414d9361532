"""Shared fixtures: offline provider by default, API tokens, the fake Ollama server, Playwright."""

from __future__ import annotations

import os
from importlib import import_module

import pytest

os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # Playwright's loop + live_server


@pytest.fixture(autouse=True)
def offline_models(settings):
    """Tests never reach a model server unless they start the fake one."""
    from memory import matrix
    from pipeline import embedders

    settings.MEMORY_LLM_PROVIDER = "offline"
    embedders._probe_cache.clear()
    # Each test's data is rolled back; a matrix kept from the previous test would be stale.
    matrix.INDEX = matrix.MatrixIndex()
    yield
    embedders._probe_cache.clear()


@pytest.fixture(autouse=True)
def data_migration_rows(request):
    """Transactional tests flush the database, data-migration rows included: put them back."""
    uses_db = request.node.get_closest_marker("django_db") is not None
    if not uses_db and not {"db", "transactional_db"} & set(request.fixturenames):
        return
    request.getfixturevalue("_django_db_helper")
    from django.apps import apps

    import_module("pipeline.migrations.0002_default_config").create_config(apps, None)


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


def _token(scopes, agent="default", name=None):
    from api.auth import create_token

    _, plain = create_token(name or f"tok-{'-'.join(scopes)}", agent_id=agent, scopes=scopes)
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
