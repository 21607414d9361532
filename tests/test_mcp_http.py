"""The MCP server over streamable HTTP, as `make run` serves it: `manage.py serve` on free ports.

serve starts gunicorn, the queue workers and the MCP server; the test reads the MCP URL it prints
and drives it with the SDK's client and a bearer token. Covered: the tool list over HTTP, 401 for
a missing or unknown token, a memory remembered over MCP and one over the JSON API that differ only
in their source (jobs processed by the running workers), and agent feedback reaching the
reviewers' slice of the dashboard and the memory page.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time

import httpx
import pytest

from tests.mcp_support import (
    BASE_DIR,
    CLIENT_INFO,
    EXPECTED_TOOLS,
    PYTHON,
    Store,
    call,
    free_port,
    http_session,
    readme_configs,
)

pytestmark = pytest.mark.slow


def wait_for(predicate, timeout: float, what: str, interval: float = 0.2):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


class Served:
    """`manage.py serve` in its own session; stop() ends it and, failing that, each child."""

    def __init__(self, store: Store, web_port: int, mcp_port: int):
        self.store = store
        self.log_path = store.root / "serve.log"
        self.log = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [PYTHON, "manage.py", "serve", "--bind", f"127.0.0.1:{web_port}", "--web-workers", "1"],
            cwd=BASE_DIR,
            env=store.process_env(
                MEMORY_MCP_BIND=f"127.0.0.1:{mcp_port}", Q_WORKERS="1", Q_POLL="0.2"
            ),
            stdin=subprocess.DEVNULL,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.web = f"http://127.0.0.1:{web_port}"

    def text(self) -> str:
        return self.log_path.read_text(errors="replace")

    def mcp_url(self) -> str | None:
        found = re.search(r"MCP for agents \(streamable HTTP\): (\S+)", self.text())
        return found.group(1) if found else None

    def child_pids(self) -> list[int]:
        return [int(pid) for pid in re.findall(r"pid (\d+)", self.text())]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)  # what Ctrl-C on `make run` sends
            try:
                self.proc.wait(timeout=25)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        for pid in self.child_pids():  # only if serve could not stop them itself
            try:
                os.killpg(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        self.log.close()


def reachable(url: str) -> bool:
    try:
        httpx.get(url, timeout=1)
        return True
    except httpx.TransportError:
        return False


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    store = Store(tmp_path_factory.mktemp("mcp-http"))
    admin = store.manage("ensure_admin")
    store.password = re.search(r"password: (\S+)", admin).group(1)
    store.tokens = {"ingest": store.token("claude-code", "ingest")}
    server = Served(store, free_port(), free_port())
    try:
        url = wait_for(server.mcp_url, 60, "serve to print the MCP URL")
        wait_for(lambda: reachable(url) and reachable(server.web + "/login/"), 60, "web and MCP")
        server.url = url
        yield server
    finally:
        server.stop()


def test_serve_prints_the_mcp_url_and_answers_the_tool_list_over_http(served):
    assert served.url == served.mcp_url()
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+/mcp", served.url)
    assert "Authorization: Bearer <token>" in served.text()

    async def steps(session):
        return (await session.list_tools()).tools

    tools = http_session(served.url, served.store.tokens["ingest"], steps)
    assert {tool.name for tool in tools} == EXPECTED_TOOLS
    http = [
        c for c in readme_configs() for s in c["mcpServers"].values() if s.get("type") == "http"
    ]
    (_, documented), *_ = http[0]["mcpServers"].items()
    assert documented["url"] == "http://127.0.0.1:8001/mcp"  # serve's default: web port + 1
    assert documented["headers"]["Authorization"].startswith("Bearer mcd_")


@pytest.mark.parametrize("header", [None, "Bearer mcd_not-a-token", "Basic abc"])
def test_requests_without_a_valid_bearer_token_get_a_401_json_error(served, header):
    headers = {"Accept": "application/json, text/event-stream"}
    if header:
        headers["Authorization"] = header
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    response = httpx.post(served.url, json=body, headers=headers, timeout=10)
    assert response.status_code == 401
    assert response.json()["error"] == "unauthorized"
    assert response.headers["WWW-Authenticate"].startswith("Bearer")


def api(served, method: str, path: str, **kwargs) -> dict:
    headers = {"Authorization": f"Bearer {served.store.tokens['ingest']}"}
    response = httpx.request(method, served.web + path, headers=headers, timeout=10, **kwargs)
    assert response.status_code < 300, response.text
    return response.json()


def processed(served, job_id: str) -> bool:
    return api(served, "GET", f"/api/jobs/{job_id}")["status"] == "completed"


def test_a_memory_remembered_over_mcp_and_one_over_the_api_differ_only_in_their_source(served):
    fields = {"who": "cursor", "why": "team convention", "type": "preference", "tags": ["git"]}
    fields |= {"importance": 0.9, "pinned": True}

    async def steps(session):
        return await call(session, "remember", content="Lena reviews every migration.", **fields)

    over_mcp = http_session(served.url, served.store.tokens["ingest"], steps)
    over_api = api(
        served,
        "POST",
        "/api/memory/remember",
        json={"content": "Omar reviews every migration.", **fields},
    )
    assert set(over_mcp) == set(over_api) and over_mcp["deduped"] is over_api["deduped"] is False
    # The running queue workers process both jobs with the offline provider.
    for answer in (over_mcp, over_api):
        wait_for(lambda a=answer: processed(served, a["jobId"]), 60, "the queue to run the job")
    mcp_memory = api(served, "GET", f"/api/memory/{over_mcp['id']}")
    api_memory = api(served, "GET", f"/api/memory/{over_api['id']}")
    assert (mcp_memory["sourceType"], mcp_memory["sourceId"]) == ("mcp", CLIENT_INFO.name)
    assert (api_memory["sourceType"], api_memory["sourceId"]) == ("manual", None)
    own = {"id", "content", "normalizedContent", "contentHash", "createdAt", "updatedAt"}
    source = {"sourceType", "sourceId"}
    assert {k: v for k, v in mcp_memory.items() if k not in own | source} == {
        k: v for k, v in api_memory.items() if k not in own | source
    }
    assert mcp_memory["extractionStatus"] == "completed"

    def trail(memory_id: str) -> list[tuple]:
        # The pipeline's own reasons depend on the other memories it compared against.
        rows = api(served, "GET", f"/api/memory/{memory_id}/history")["history"]
        return [
            (
                r["event"],
                r["changedBy"],
                r["actorType"],
                r["metadata"] if r["event"] == "created" else None,
            )
            for r in rows
        ]

    created = api(served, "GET", f"/api/memory/{over_mcp['id']}/history")["history"][0]
    assert (created["event"], created["changedBy"], created["reason"]) == (
        "created",
        "claude-code",
        "team convention",
    )
    assert trail(over_mcp["id"]) == trail(over_api["id"])


def login(served) -> httpx.Client:
    client = httpx.Client(base_url=served.web, timeout=10, follow_redirects=True)
    page = client.get("/login/")
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)
    form = {"username": "admin", "password": served.store.password, "csrfmiddlewaretoken": token}
    done = client.post("/login/", data=form, headers={"Referer": served.web + "/login/"})
    assert done.status_code == 200 and "/login/" not in str(done.url)
    return client


def test_agent_feedback_reaches_the_reviewers_slice_and_the_memory_page(served):
    async def steps(session):
        wrong = await call(session, "remember", content="The VPN gateway is vpn-old.example.org.")
        unused = await call(
            session, "remember", content="The office plants are watered on Mondays."
        )
        helpful = await call(session, "remember", content="Staging deploys need two approvals.")
        note = "The runbook now names vpn.example.org as the only gateway."
        for _ in range(2):
            await call(session, "feedback", id=wrong["id"], verdict="contradicted", note=note)
        await call(session, "feedback", id=wrong["id"], verdict="used")
        for _ in range(3):
            await call(session, "feedback", id=unused["id"], verdict="ignored")
        await call(session, "feedback", id=helpful["id"], verdict="ignored")
        await call(session, "feedback", id=helpful["id"], verdict="used")
        return wrong, unused, helpful, note

    wrong, unused, helpful, note = http_session(served.url, served.store.tokens["ingest"], steps)
    browser = login(served)
    try:
        contradicted = browser.get("/memories/", params={"feedback": "contradicted"}).text
        ignored = browser.get("/memories/", params={"feedback": "ignored"}).text
        page = browser.get(f"/memories/{wrong['id']}/").text
    finally:
        browser.close()
    assert wrong["id"] in contradicted and unused["id"] not in contradicted
    assert re.search(
        r"2 contradicted</span>\s*<span class=\"muted\">· 0 ignored · 1 used", contradicted
    )
    # "never used": reported ignored, and never reported used.
    assert unused["id"] in ignored and helpful["id"] not in ignored and wrong["id"] not in ignored
    assert re.search(r"0 contradicted</span>\s*<span class=\"muted\">· 3 ignored · 0 used", ignored)
    assert "2 contradicted</span> · 0 ignored · 1 used" in page
    assert note in page and 'badge-warn" data-testid="event">feedback' in page
    assert re.search(
        r"MCP by <strong>claude-code</strong> with the client <code>test-agent</code>", page
    )
