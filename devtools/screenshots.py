"""python -m devtools.screenshots [--out DIR]: retake the README's screenshots from a fresh demo."""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from playwright.sync_api import sync_playwright

ROOT = Path(__file__).resolve().parent.parent
DESKTOP = {"viewport": {"width": 1400, "height": 900}}
PHONE = {"viewport": {"width": 390, "height": 844}, "device_scale_factor": 2, "is_mobile": True}
# The same Chromium and flags as the browser tests (tests/conftest.py).
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]
# The README's memory: a derived decision whose lineage runs from the raw source to approval.
MEMORY_TEXT = "Decided to use PostgreSQL 16 for all new services"


def manage(env: dict, *args: str) -> str:
    """Run one manage.py command in the throwaway store and return its output."""
    done = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,  # stderr stays on the terminal, so a failing step says why
        text=True,
        check=True,
    )
    return done.stdout


def free_port() -> int:
    """A loopback port nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until_up(url: str, server: subprocess.Popen) -> None:
    """Return once the server answers; fail if it exits or takes over 30 s."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise SystemExit(f"the server exited with {server.returncode}")
        try:
            urllib.request.urlopen(url + "login/", timeout=2)
            return
        except OSError:
            time.sleep(0.3)
    raise SystemExit("the server did not answer within 30 s")


def sign_in(page, url: str) -> None:
    """Sign in as the demo reviewer, the person the README's pictures show at work."""
    page.goto(url + "login/")
    page.fill("#id_username", "reviewer")
    page.fill("#id_password", "demo-reviewer")
    page.click("button[type=submit]")
    page.wait_for_url(url)


def shoot(page, url: str, path: Path) -> None:
    """Open url, let htmx and the charts settle, and save the viewport."""
    page.goto(url)
    page.wait_for_load_state("networkidle")
    page.screenshot(path=str(path))
    print(f"wrote {path}")


def capture(url: str, memory_id: str, out: Path) -> None:
    """Take the four pictures from the server at url."""
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        try:
            page = browser.new_page(**DESKTOP)
            sign_in(page, url)
            shoot(page, url + "review/", out / "review-queue.png")
            shoot(page, url + "contradictions/", out / "contradictions.png")
            shoot(page, f"{url}memories/{memory_id}/", out / "memory.png")
            phone = browser.new_page(**PHONE)
            sign_in(phone, url)
            shoot(phone, url + "review/", out / "review-queue-phone.png")
        finally:
            browser.close()


def main() -> None:
    """Seed a throwaway demo store, serve it on a free port, capture, and clean up."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "screenshots")
    out = parser.parse_args().out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="memory-screenshots-") as data:
        env = {
            **os.environ,
            "MEMORY_DATA_DIR": data,
            "MEMORY_DB_PATH": os.path.join(data, "memory.sqlite3"),
            "MEMORY_LLM_PROVIDER": "offline",
            "DATABASE_URL": "",  # always the throwaway SQLite file, never a configured server
        }
        # The same steps as `make run`, plus the demo reviewer to sign in as.
        manage(env, "migrate", "--noinput")
        manage(env, "collectstatic", "--noinput", "--verbosity", "0")
        manage(env, "ensure_admin")
        manage(env, "seed_demo", "--with-demo-users")
        memory_id = manage(
            env,
            "shell",
            "--verbosity",
            "0",
            "-c",
            "from memory.models import DERIVED_SOURCE_TYPE as D, Memory; "
            f"print(Memory.objects.get(content__startswith={MEMORY_TEXT!r}, source_type=D).id)",
        ).strip()
        port = free_port()
        url = f"http://127.0.0.1:{port}/"
        # gunicorn alone: the pictures need the web pages, not the workers or the MCP server.
        gunicorn = os.path.join(os.path.dirname(sys.executable), "gunicorn")
        server = subprocess.Popen(
            [gunicorn, "config.wsgi", "--bind", f"127.0.0.1:{port}", "--workers", "1"],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            wait_until_up(url, server)
            capture(url, memory_id, out)
        finally:
            server.terminate()
            server.wait(timeout=15)


if __name__ == "__main__":
    main()
