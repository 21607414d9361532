"""Browser tests: Playwright driving Debian's Chromium against the live server."""

from __future__ import annotations

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
