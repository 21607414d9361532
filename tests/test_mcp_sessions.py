"""One ingest token cannot exhaust MCP (issue 21, item 4): the sessions a token holds open are
capped, the server's total is capped, idle sessions end by themselves, and a session belongs to the
token that opened it (another token using or deleting it gets 404). The server is the real
`manage.py mcp --http` with small limits; the client speaks the streamable HTTP wire format."""

from __future__ import annotations

import subprocess
import time

import httpx
import pytest

from tests.mcp_support import BASE_DIR, PYTHON, Store, free_port
from tests.test_mcp_http import reachable, wait_for

pytestmark = pytest.mark.slow

INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "session-test", "version": "1"},
    },
}
ACCEPT = "application/json, text/event-stream"


@pytest.fixture(scope="module")
def mcp(tmp_path_factory):
    store = Store(tmp_path_factory.mktemp("mcp-sessions"))
    store.manage("migrate", "--noinput")
    store.tokens = {
        "greedy": store.token("greedy", "ingest"),
        "other": store.token("other", "ingest"),
        "third": store.token("third", "ingest"),
    }
    port = free_port()
    log = open(store.root / "mcp.log", "wb")  # noqa: SIM115 - closed below
    server = subprocess.Popen(
        [PYTHON, "manage.py", "mcp", "--http", "--bind", f"127.0.0.1:{port}"],
        cwd=BASE_DIR,
        env=store.process_env(
            MEMORY_MCP_SESSIONS_PER_TOKEN="3",
            MEMORY_MCP_MAX_SESSIONS="5",
            MEMORY_MCP_SESSION_IDLE_SECONDS="3",
        ),
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}/mcp"
    try:
        wait_for(lambda: reachable(url), 60, "the MCP server")
        store.url = url
        yield store
    finally:
        server.terminate()
        server.wait(timeout=20)
        log.close()


def headers(token: str, session: str | None = None) -> dict:
    found = {"Authorization": f"Bearer {token}", "Accept": ACCEPT}
    if session:
        found["mcp-session-id"] = session
    return found


def open_session(mcp, token: str) -> httpx.Response:
    return httpx.post(mcp.url, json=INITIALIZE, headers=headers(token), timeout=10)


def end(mcp, token: str, session: str) -> int:
    return httpx.delete(mcp.url, headers=headers(token, session), timeout=10).status_code


def test_a_token_cannot_hold_more_than_its_share_of_sessions(mcp):
    opened = [open_session(mcp, mcp.tokens["greedy"]) for _ in range(3)]
    assert [answer.status_code for answer in opened] == [200, 200, 200]
    refused = open_session(mcp, mcp.tokens["greedy"])
    assert refused.status_code == 429
    assert refused.json()["error"] == "too_many_sessions"
    # Another agent still gets in while the greedy one holds all it may.
    other = open_session(mcp, mcp.tokens["other"])
    assert other.status_code == 200
    # Ending one gives the token room again.
    assert end(mcp, mcp.tokens["greedy"], opened[0].headers["mcp-session-id"]) == 200
    again = open_session(mcp, mcp.tokens["greedy"])
    assert again.status_code == 200
    for answer in [*opened[1:], again]:
        end(mcp, mcp.tokens["greedy"], answer.headers["mcp-session-id"])
    end(mcp, mcp.tokens["other"], other.headers["mcp-session-id"])


def test_a_session_belongs_to_the_token_that_opened_it(mcp):
    session = open_session(mcp, mcp.tokens["greedy"]).headers["mcp-session-id"]
    ping = {"jsonrpc": "2.0", "id": 2, "method": "ping"}
    stolen = httpx.post(
        mcp.url, json=ping, headers=headers(mcp.tokens["other"], session), timeout=10
    )
    assert stolen.status_code == 404
    assert end(mcp, mcp.tokens["other"], session) == 404  # nor may it end another's session
    owned = httpx.post(
        mcp.url, json=ping, headers=headers(mcp.tokens["greedy"], session), timeout=10
    )
    assert owned.status_code == 200
    assert end(mcp, mcp.tokens["greedy"], session) == 200


def test_idle_sessions_end_and_free_their_place(mcp):
    sessions = [open_session(mcp, mcp.tokens["third"]) for _ in range(3)]
    assert all(answer.status_code == 200 for answer in sessions)
    assert open_session(mcp, mcp.tokens["third"]).status_code == 429
    time.sleep(4.5)  # past MEMORY_MCP_SESSION_IDLE_SECONDS
    ping = {"jsonrpc": "2.0", "id": 3, "method": "ping"}
    expired = httpx.post(
        mcp.url,
        json=ping,
        headers=headers(mcp.tokens["third"], sessions[0].headers["mcp-session-id"]),
        timeout=10,
    )
    assert expired.status_code == 404
    fresh = open_session(mcp, mcp.tokens["third"])
    assert fresh.status_code == 200
    end(mcp, mcp.tokens["third"], fresh.headers["mcp-session-id"])


def test_the_server_total_is_capped_across_tokens(mcp):
    opened = []
    for name in ("greedy", "other", "third"):
        opened += [(name, open_session(mcp, mcp.tokens[name])) for _ in range(2)]
    statuses = [answer.status_code for _, answer in opened]
    assert statuses.count(200) == 5 and statuses[-1] == 503  # the sixth: the server is full
    for name, answer in opened:
        if answer.status_code == 200:
            end(mcp, mcp.tokens[name], answer.headers["mcp-session-id"])
