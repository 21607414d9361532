"""Harness for the MCP tests: a migrated SQLite file for subprocesses, tokens, the SDK's client.

The servers under test are real subprocesses (`manage.py mcp`, `manage.py serve`), so they work on
their own database file, reached through MEMORY_DB_PATH; nothing here shares pytest's database.
"""

from __future__ import annotations

import json
import os
import re
import socket
import sqlite3
import subprocess
import sys
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
from mcp import ClientSession, Implementation, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

BASE_DIR = Path(__file__).resolve().parents[1]
PYTHON = sys.executable
# Only what a process needs from this one: no DATABASE_URL, no test-database paths.
PASSED_ENV = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "SYSTEMROOT")

# The name an agent's MCP client announces; the server records it as the memory's sourceId.
CLIENT_INFO = Implementation(name="test-agent", version="1.0")
STORE_TABLES = (
    "memories",
    "memory_history",
    "memories_cold",
    "memory_jobs",
    "embeddings",
    "entities",
    "relations",
    "memory_entity_mentions",
    "pipeline_proposals",
    "django_q_ormq",
)
EXPECTED_TOOLS = {
    "remember",
    "recall",
    "get_memory",
    "memory_history",
    "list_memories",
    "modify",
    "forget",
    "feedback",
    "pipeline_status",
}


def run_in_own_thread(main) -> Any:
    """anyio.run(main) on a fresh thread: Playwright's sync API (browser tests earlier in the same
    session) leaves an event loop on the main thread, and anyio refuses to nest in it."""
    outcome: dict[str, Any] = {}

    def target():
        try:
            outcome["value"] = anyio.run(main)
        except BaseException as exc:  # re-raised in the caller's thread
            outcome["error"] = exc

    thread = threading.Thread(target=target, name="mcp-client")
    thread.start()
    thread.join()
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Store:
    """A migrated database file and data folder, and the environment that points a process at it."""

    def __init__(self, root: Path, **extra_env: str):
        self.root = root
        self.env = {
            "MEMORY_DB_PATH": str(root / "memory.sqlite3"),
            "MEMORY_DATA_DIR": str(root),
            "MEMORY_LLM_PROVIDER": "offline",
            "DJANGO_SECRET_KEY": "mcp-tests-secret-key-not-for-production",
            "PYTHONUNBUFFERED": "1",
            **extra_env,
        }
        self.manage("migrate", "--noinput", "-v", "0")

    def process_env(self, **extra: str) -> dict[str, str]:
        inherited = {key: os.environ[key] for key in PASSED_ENV if key in os.environ}
        return {**inherited, **self.env, **extra}

    def manage(self, *args: str, timeout: float = 120, **extra_env: str) -> str:
        done = subprocess.run(
            [PYTHON, "manage.py", *args],
            cwd=BASE_DIR,
            env=self.process_env(**extra_env),
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        assert done.returncode == 0, f"manage.py {' '.join(args)} failed:\n{done.stderr}"
        return done.stdout

    def counts(self) -> dict[str, int]:
        """Rows per store table, read straight from the file (read-only)."""
        db = sqlite3.connect(f"file:{self.env['MEMORY_DB_PATH']}?mode=ro", uri=True)
        try:
            return {t: db.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0] for t in STORE_TABLES}
        finally:
            db.close()

    def token(self, name: str, scopes: str = "ingest", agent: str = "default") -> str:
        """A token from `create_api_token`, which prints it alone on its last line."""
        out = self.manage("create_api_token", name, "--agent", agent, "--scopes", scopes)
        return out.strip().splitlines()[-1]


# --- the SDK's client ------------------------------------------------------------------------------

Steps = Callable[[ClientSession], Awaitable[Any]]


def over_stdio(params: StdioServerParameters, steps: Steps, errlog: Path) -> Any:
    """Start the server as the SDK's stdio client does, initialise a session, run steps in it."""

    async def main():
        with open(errlog, "a") as log:
            async with (
                stdio_client(params, errlog=log) as (read, write),
                ClientSession(read, write, client_info=CLIENT_INFO) as session,
            ):
                await session.initialize()
                return await steps(session)

    return run_in_own_thread(main)


def stdio_params(store: Store, token: str, **extra_env: str) -> StdioServerParameters:
    return StdioServerParameters(
        command=PYTHON,
        args=["manage.py", "mcp"],
        cwd=str(BASE_DIR),
        env={**store.env, "MEMORY_MCP_TOKEN": token, **extra_env},
    )


def stdio_session(store: Store, token: str, steps: Steps, **extra_env: str) -> Any:
    return over_stdio(stdio_params(store, token, **extra_env), steps, store.root / "mcp.log")


def http_session(url: str, token: str, steps: Steps) -> Any:
    async def main():
        headers = {"Authorization": f"Bearer {token}"}
        async with (
            create_mcp_http_client(headers=headers) as http,
            streamable_http_client(url, http_client=http) as (read, write, *_),
            ClientSession(read, write, client_info=CLIENT_INFO) as session,
        ):
            await session.initialize()
            return await steps(session)

    return run_in_own_thread(main)


async def call(session: ClientSession, name: str, **arguments) -> dict:
    """A successful tool call's JSON answer (its text and its structured content agree)."""
    payload, is_error = await call_raw(session, name, arguments)
    assert not is_error, f"{name} failed: {payload}"
    return payload


async def call_raw(session: ClientSession, name: str, arguments: dict) -> tuple[dict, bool]:
    result = await session.call_tool(name, arguments)
    payload = json.loads(result.content[0].text)
    assert result.structured_content == payload
    return payload, result.is_error


# --- the README's snippets --------------------------------------------------------------------------

README = BASE_DIR / "README.md"
README_SECTION = "## Connect an agent over MCP"


def readme_configs() -> list[dict]:
    """Every JSON block of the README's MCP section, parsed."""
    text = README.read_text()
    assert README_SECTION in text, f"README.md has no section {README_SECTION!r}"
    section = text.split(README_SECTION, 1)[1]
    section = re.split(r"\n## ", section, maxsplit=1)[0]
    return [json.loads(block) for block in re.findall(r"```json\n(.*?)```", section, re.S)]
