"""Browser tests: Playwright driving Debian's Chromium against the live server."""

from __future__ import annotations

import contextlib
import threading
import time
from pathlib import Path

import pytest
from playwright.sync_api import expect

# CI machines have two cores shared with the live server and the browser: allow slow moments.
expect.set_options(timeout=15_000)

ARTIFACTS = Path(__file__).resolve().parents[2] / "test-artifacts"


def pytest_collection_modifyitems(config, items):
    """Every browser test is also `slow`: the quick loop (`pytest -m "not slow"`) leaves them out."""
    here = Path(__file__).parent
    for item in items:
        if here in item.path.parents:
            item.add_marker(pytest.mark.slow)


@pytest.fixture(autouse=True)
def patient_page(page):
    page.set_default_timeout(20_000)
    return page


@pytest.fixture(autouse=True)
def one_request_at_a_time(live_server):
    """The live server answers one request at a time on SQLite. Its threads open their own
    connections to the test's in-memory database (shared cache), where a write meeting another
    connection's transaction fails at once with "database table is locked" instead of waiting:
    two requests at once (a claim sent on focus while a decision is posted) must not overlap.
    On PostgreSQL each thread waits for its locks as in production, and nothing changes."""
    from django.db import connection

    if connection.vendor != "sqlite":
        return
    # The test's own reads between its steps never fail on a claim the page is writing then.
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA read_uncommitted = 1")
    httpd = live_server.thread.httpd
    if getattr(httpd, "one_at_a_time", False):
        return
    app, lock = httpd.get_app(), threading.Lock()

    def serial(environ, start_response):
        with lock:
            result = app(environ, start_response)
            try:
                return list(result)
            finally:
                if hasattr(result, "close"):
                    result.close()

    httpd.set_app(serial)
    httpd.one_at_a_time = True
    httpd.request_lock = lock


@pytest.fixture
def between_requests(live_server):
    """A context manager for a test's own write while its pages keep talking to the server (a
    claims poll): it runs between two requests, never during one (SQLite: see above)."""
    lock = getattr(live_server.thread.httpd, "request_lock", None)
    return lock if lock is not None else contextlib.nullcontext()


@pytest.fixture(autouse=True)
def quiet_at_the_end(page, live_server):
    """After each test, before its database is flushed: the page stops talking to the server
    (its claim, its claims poll, and the beacon that releases a claim when the page is left:
    routing never sees a beacon sent while the page unloads, so it is silenced first) and the
    requests the live server is still answering finish: a late request would meet the flush of
    the test's database half-way (on SQLite one of the two fails at once)."""
    yield
    try:
        page.evaluate("navigator.sendBeacon = () => true")
        page.route("**/*", lambda route: route.abort())
        page.goto("about:blank")
    except Exception:  # a page that already failed or closed has nothing left to send
        pass
    # socketserver keeps the threads of the requests it is answering (block_on_close); a
    # request the browser sent just before is accepted within moments, hence a second look.
    httpd = getattr(live_server.thread, "httpd", None)
    for _ in range(2):
        for thread in list(getattr(httpd, "_threads", None) or []):
            thread.join(timeout=10)
        time.sleep(0.05)


@pytest.fixture
def shot(page):
    """Save a full-page screenshot under test-artifacts/ (ignored by git)."""
    ARTIFACTS.mkdir(exist_ok=True)

    def take(name: str) -> Path:
        path = ARTIFACTS / f"{name}.png"
        page.screenshot(path=str(path), full_page=True)
        return path

    return take


@pytest.fixture
def login(page, live_server, role_users):
    def as_user(role: str = "reviewer"):
        user = role_users[role]
        page.goto(f"{live_server.url}/login/")
        page.fill("#id_username", user.username)
        page.fill("#id_password", "pw-" + user.username)
        page.click("button[type=submit]")
        page.wait_for_url(f"{live_server.url}/")
        return user

    return as_user
