"""The MCP server over stdio, driven by the SDK's own client against `python manage.py mcp`.

Each session starts the server as an agent would (a subprocess on a migrated database file, the
token in MEMORY_MCP_TOKEN). Covered: the tool list and schemas, remember -> process_jobs ->
recall -> history, feedback in the audit trail, every scope, bad input (the JSON API's messages,
nothing written), the memory:// resource, and the README's stdio snippet run as written.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from mcp import StdioServerParameters

from tests.mcp_support import (
    BASE_DIR,
    CLIENT_INFO,
    EXPECTED_TOOLS,
    PYTHON,
    Store,
    call,
    call_raw,
    over_stdio,
    readme_configs,
    stdio_session,
)

pytestmark = pytest.mark.slow

PLACEHOLDER = "/path/to/memory-curation-dashboard"

MAX_CHARS = 2000  # MEMORY_MAX_CONTENT_CHARS of the server and of the in-process API alike
SEEDS = [
    "The staging cluster runs in the eu-west-1 region.",
    "Kenji owns the billing dashboard and its alerts.",
    "Deployments freeze every Friday after 15:00.",
    "Ana writes the payments gateway in Go.",
]


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    store = Store(tmp_path_factory.mktemp("mcp-stdio"), MEMORY_MAX_CONTENT_CHARS=str(MAX_CHARS))
    store.tokens = {
        "ingest": store.token("claude-code", "ingest"),
        "review": store.token("reviewer-bot", "review"),
        "admin": store.token("admin-bot", "admin"),
    }
    return store


def remember_one(store: Store, content: str, token: str = "ingest", **extra) -> dict:
    async def steps(session):
        return await call(session, "remember", content=content, **extra)

    return stdio_session(store, store.tokens[token], steps)


# --- the tool list ------------------------------------------------------------------------------


def test_it_lists_every_tool_with_a_json_schema_and_a_description_for_a_model(store):
    async def steps(session):
        tools = (await session.list_tools()).tools
        templates = (await session.list_resource_templates()).resource_templates
        return tools, templates

    tools, templates = stdio_session(store, store.tokens["ingest"], steps)
    by_name = {tool.name: tool for tool in tools}
    assert set(by_name) == EXPECTED_TOOLS
    assert not any(word in name for name in by_name for word in ("approve", "reject"))
    for tool in tools:
        schema = tool.input_schema
        assert schema["type"] == "object" and schema["additionalProperties"] is False
        assert set(schema["required"]) <= set(schema["properties"])
        assert len(tool.description) > 100, tool.name
    required = {name: set(tool.input_schema["required"]) for name, tool in by_name.items()}
    assert required["remember"] == {"content"}
    assert required["recall"] == {"query"}
    assert required["modify"] == required["forget"] == {"id", "reason"}
    assert required["feedback"] == {"id", "verdict"}
    assert required["pipeline_status"] == required["list_memories"] == set()
    remember = by_name["remember"].input_schema["properties"]
    assert {"content", "who", "type", "tags", "importance", "pinned", "project"} <= set(remember)
    assert remember["tags"] == {**remember["tags"], "type": "array", "items": {"type": "string"}}
    assert by_name["feedback"].input_schema["properties"]["verdict"]["enum"] == [
        "used",
        "ignored",
        "contradicted",
    ]
    assert by_name["modify"].input_schema["properties"]["ifVersion"]["type"] == "integer"
    for name in ("modify", "forget"):
        assert "'review' scope" in by_name[name].description
        assert by_name[name].annotations.destructive_hint is True
    for name in ("recall", "get_memory", "memory_history", "list_memories", "pipeline_status"):
        assert by_name[name].annotations.read_only_hint is True
    assert [t.uri_template for t in templates] == ["memory://{id}"]


# --- remember, the job, recall, history ------------------------------------------------------------


def test_it_remembers_raw_first_then_the_processed_memory_is_recalled_with_its_history(store):
    # Two facts in one raw memory: in shadow mode each becomes a proposal waiting for a person.
    fact = "Priya prefers squash merges for every repository. The billing API deploys from main."

    async def first(session):
        for seed in SEEDS:
            await call(session, "remember", content=seed)
        stored = await call(
            session, "remember", content=fact, tags=["git"], project="billing", importance=0.8
        )
        again = await call(session, "remember", content=fact.lower().rstrip("."))
        memory = await call(session, "get_memory", id=stored["id"])
        status = await call(session, "pipeline_status")
        return stored, again, memory, status

    stored, again, memory, status = stdio_session(store, store.tokens["ingest"], first)
    assert stored["deduped"] is False and stored["jobId"] and len(stored["contentHash"]) == 64
    assert again == {**again, "id": stored["id"], "deduped": True, "jobId": None}
    assert memory["content"] == fact and memory["extractionStatus"] == "pending"
    assert (memory["sourceType"], memory["sourceId"]) == ("mcp", CLIENT_INFO.name)
    assert (memory["who"], memory["agentId"]) == ("claude-code", "default")
    assert memory["tags"] == ["git", "project:billing"] and memory["importance"] == 0.8
    assert status["mode"] == "shadow" and status["jobs"]["pending"] == len(SEEDS) + 1

    assert "Processed" in store.manage("process_jobs")

    async def second(session):
        memory = await call(session, "get_memory", id=stored["id"])
        found = await call(session, "recall", query="squash merges", limit=3)
        narrowed = await call(session, "recall", query="squash merges", project="elsewhere")
        history = await call(session, "memory_history", id=stored["id"])
        status = await call(session, "pipeline_status")
        resource = await session.read_resource(f"memory://{stored['id']}")
        listed = (await session.list_resources()).resources
        return memory, found, narrowed, history, status, resource, listed

    memory, found, narrowed, history, status, resource, listed = stdio_session(
        store, store.tokens["ingest"], second
    )
    assert memory["extractionStatus"] == "completed" and memory["embeddingModel"]
    assert found["results"][0]["id"] == stored["id"] and found["results"][0]["score"] > 0
    assert {"score", "keywordScore", "vectorScore", "content"} <= set(found["results"][0])
    assert narrowed["results"] == []
    created = history["history"][0]
    assert (created["event"], created["changedBy"], created["actorType"]) == (
        "created",
        "claude-code",
        "agent",
    )
    assert status["jobs"]["pending"] == 0 and status["pendingProposals"] >= 1
    assert status["contradictions"] == 0
    body = json.loads(resource.contents[0].text)
    assert resource.contents[0].mime_type == "application/json"
    assert body["memory"]["id"] == stored["id"] and body["history"] == history["history"]
    assert f"memory://{stored['id']}" in {str(item.uri) for item in listed}


def test_feedback_is_recorded_in_the_audit_trail_without_changing_the_memory(store):
    stored = remember_one(store, "The release train leaves every second Tuesday.")

    async def steps(session):
        await call(session, "feedback", id=stored["id"], verdict="used")
        await call(
            session, "feedback", id=stored["id"], verdict="ignored", note="not about releases"
        )
        answer = await call(
            session,
            "feedback",
            id=stored["id"],
            verdict="contradicted",
            note="The wiki says releases go out weekly now.",
        )
        memory = await call(session, "get_memory", id=stored["id"])
        history = await call(session, "memory_history", id=stored["id"])
        return answer, memory, history

    answer, memory, history = stdio_session(store, store.tokens["ingest"], steps)
    assert answer["memoryId"] == stored["id"] and answer["recorded"]["event"] == "feedback"
    assert memory["version"] == 1
    feedback = [row for row in history["history"] if row["event"] == "feedback"]
    assert [row["metadata"]["verdict"] for row in feedback] == ["used", "ignored", "contradicted"]
    assert feedback[-1]["reason"] == "The wiki says releases go out weekly now."
    assert {(row["changedBy"], row["actorType"]) for row in feedback} == {("claude-code", "agent")}
    assert feedback[-1]["metadata"] == {
        **feedback[-1]["metadata"],
        "via": "mcp",
        "client": CLIENT_INFO.name,
        "agentId": "default",
    }


# --- scopes ---------------------------------------------------------------------------------------


def forbidden(scope: str) -> dict:
    return {"error": "forbidden", "message": f"this token lacks the '{scope}' scope"}


def test_every_tool_keeps_the_scopes_of_the_json_api(store):
    pinned = remember_one(store, "Never rotate the root CA by hand.", pinned=True)
    before = store.counts()

    async def as_ingest(session):
        return [
            await call_raw(session, "modify", {"id": pinned["id"], "reason": "r", "type": "x"}),
            await call_raw(session, "forget", {"id": pinned["id"], "reason": "r", "force": True}),
            await call_raw(session, "get_memory", {"id": pinned["id"]}),
        ]

    modify, forget, read = stdio_session(store, store.tokens["ingest"], as_ingest)
    assert modify == (forbidden("review"), True) and forget == (forbidden("review"), True)
    assert read[1] is False and read[0]["version"] == 1
    assert store.counts() == before

    async def as_reviewer(session):
        refused = [
            await call_raw(session, "remember", {"content": "A reviewer's memory."}),
            await call_raw(session, "feedback", {"id": pinned["id"], "verdict": "used"}),
            await call_raw(
                session,
                "modify",
                {"id": pinned["id"], "reason": "r", "type": "rule", "ifVersion": 7},
            ),
            await call_raw(session, "forget", {"id": pinned["id"], "reason": "obsolete"}),
        ]
        modified = await call(
            session, "modify", id=pinned["id"], reason="it is a rule", type="rule", ifVersion=1
        )
        forgotten = await call(
            session, "forget", id=pinned["id"], reason="obsolete", force=True, ifVersion=2
        )
        return refused, modified, forgotten

    refused, modified, forgotten = stdio_session(store, store.tokens["review"], as_reviewer)
    assert refused[0] == (forbidden("ingest"), True) and refused[1] == (forbidden("ingest"), True)
    assert refused[2] == (
        {
            "error": "version_conflict",
            "message": "memory is at version 1, not 7",
            "currentVersion": 1,
        },
        True,
    )
    assert refused[3] == (
        {"error": "pinned_requires_force", "message": "memory is pinned; pass force to forget it"},
        True,
    )
    assert modified["status"] == "updated" and modified["memory"]["version"] == 2
    assert modified["memory"]["updatedBy"] == "reviewer-bot"
    assert forgotten == {"id": pinned["id"], "status": "deleted", "version": 3}

    async def as_admin(session):
        stored = await call(session, "remember", content="Admins may write too.")
        await call(session, "feedback", id=stored["id"], verdict="used")
        return await call(
            session, "modify", id=stored["id"], reason="typo", content="Admins may write, too."
        )

    assert stdio_session(store, store.tokens["admin"], as_admin)["status"] == "updated"


@pytest.mark.parametrize(
    ("token", "message"),
    [("", "MEMORY_MCP_TOKEN is not set"), ("mcd_not-a-token", "not a valid, unrevoked API token")],
)
def test_the_server_refuses_to_start_without_a_valid_token(store, token, message):
    done = subprocess.run(
        [PYTHON, "manage.py", "mcp"],
        cwd=BASE_DIR,
        env=store.process_env(MEMORY_MCP_TOKEN=token),
        input="",
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0 and message in done.stderr and done.stdout == ""


# --- bad input: the API's messages, nothing written -------------------------------------------------

ANY_ID = "00000000-0000-4000-8000-000000000000"
# (tool, arguments, the same request to the JSON API: method, path, body, token)
SAME_AS_API = [
    ("remember", {}, "post", "/api/memory/remember", {}, "ingest"),
    ("remember", {"content": 5}, "post", "/api/memory/remember", {"content": 5}, "ingest"),
    (
        "remember",
        {"content": " \n "},
        "post",
        "/api/memory/remember",
        {"content": " \n "},
        "ingest",
    ),
    (
        "remember",
        {"content": "x" * (MAX_CHARS + 1)},
        "post",
        "/api/memory/remember",
        {"content": "x" * (MAX_CHARS + 1)},
        "ingest",
    ),
    (
        "remember",
        {"content": "ok text", "tags": "git"},
        "post",
        "/api/memory/remember",
        {"content": "ok text", "tags": "git"},
        "ingest",
    ),
    (
        "remember",
        {"content": "ok text", "tags": [1]},
        "post",
        "/api/memory/remember",
        {"content": "ok text", "tags": [1]},
        "ingest",
    ),
    (
        "remember",
        {"content": "ok text", "importance": 2},
        "post",
        "/api/memory/remember",
        {"content": "ok text", "importance": 2},
        "ingest",
    ),
    (
        "remember",
        {"content": "ok text", "importance": True},
        "post",
        "/api/memory/remember",
        {"content": "ok text", "importance": True},
        "ingest",
    ),
    (
        "remember",
        {"content": "ok text", "pinned": "yes"},
        "post",
        "/api/memory/remember",
        {"content": "ok text", "pinned": "yes"},
        "ingest",
    ),
    (
        "remember",
        {"content": "ok text", "who": "w" * 201},
        "post",
        "/api/memory/remember",
        {"content": "ok text", "who": "w" * 201},
        "ingest",
    ),
    (
        "remember",
        {"content": "ok text", "type": "t" * 41},
        "post",
        "/api/memory/remember",
        {"content": "ok text", "type": "t" * 41},
        "ingest",
    ),
    ("recall", {}, "post", "/api/memory/recall", {}, "ingest"),
    ("recall", {"query": 7}, "post", "/api/memory/recall", {"query": 7}, "ingest"),
    ("recall", {"query": "  "}, "post", "/api/memory/recall", {"query": "  "}, "ingest"),
    (
        "recall",
        {"query": "x", "limit": 0},
        "post",
        "/api/memory/recall",
        {"query": "x", "limit": 0},
        "ingest",
    ),
    (
        "recall",
        {"query": "x", "limit": "5"},
        "post",
        "/api/memory/recall",
        {"query": "x", "limit": "5"},
        "ingest",
    ),
    ("modify", {"id": ANY_ID}, "patch", f"/api/memory/{ANY_ID}", {}, "review"),
    (
        "modify",
        {"id": ANY_ID, "reason": "r"},
        "patch",
        f"/api/memory/{ANY_ID}",
        {"reason": "r"},
        "review",
    ),
    (
        "modify",
        {"id": ANY_ID, "reason": "r", "content": ""},
        "patch",
        f"/api/memory/{ANY_ID}",
        {"reason": "r", "content": ""},
        "review",
    ),
    (
        "modify",
        {"id": ANY_ID, "reason": "r", "importance": -1},
        "patch",
        f"/api/memory/{ANY_ID}",
        {"reason": "r", "importance": -1},
        "review",
    ),
    (
        "modify",
        {"id": ANY_ID, "reason": "r", "pinned": True, "ifVersion": 0},
        "patch",
        f"/api/memory/{ANY_ID}",
        {"reason": "r", "pinned": True, "ifVersion": 0},
        "review",
    ),
    (
        "modify",
        {"id": ANY_ID, "reason": "r", "pinned": True},
        "patch",
        f"/api/memory/{ANY_ID}",
        {"reason": "r", "pinned": True},
        "review",
    ),
    ("forget", {"id": ANY_ID}, "delete", f"/api/memory/{ANY_ID}", {}, "review"),
    (
        "forget",
        {"id": ANY_ID, "reason": "r", "ifVersion": "2"},
        "delete",
        f"/api/memory/{ANY_ID}",
        {"reason": "r", "ifVersion": "2"},
        "review",
    ),
    (
        "forget",
        {"id": ANY_ID, "reason": "r"},
        "delete",
        f"/api/memory/{ANY_ID}",
        {"reason": "r"},
        "review",
    ),
    ("get_memory", {"id": ANY_ID}, "get", f"/api/memory/{ANY_ID}", None, "ingest"),
    ("memory_history", {"id": ANY_ID}, "get", f"/api/memory/{ANY_ID}/history", None, "ingest"),
]
# Arguments only MCP has (no API twin): (tool, arguments, error code, message fragment)
MCP_ONLY = [
    (
        "remember",
        {"content": "ok text", "text": "typo"},
        "invalid_request",
        "unknown argument(s): text; remember takes content",
    ),
    (
        "remember",
        {"content": "ok\x00text"},
        "invalid_request",
        "arguments.content contains a NUL byte",
    ),
    (
        "remember",
        {"content": "ok text", "project": " "},
        "invalid_request",
        "project must be a non-empty string",
    ),
    (  # the schema allows 50 tags; the project is one more (found by a QA pass)
        "remember",
        {"content": "ok text", "project": "infra", "tags": [f"t{i}" for i in range(50)]},
        "invalid_request",
        "tags may hold at most 49 items with a project",
    ),
    (  # a tag that is not a string, with a project: the tags' error, not a server failure
        "recall",
        {"query": "x", "tags": [[1]], "project": "infra"},
        "invalid_request",
        "tags must be a list of strings",
    ),
    (  # "project:" and the name make one tag, which holds 100 characters
        "remember",
        {"content": "ok text", "project": "p" * 93},
        "invalid_request",
        "project must be at most 92 characters",
    ),
    ("get_memory", {}, "invalid_request", "id is required"),
    (
        "feedback",
        {"id": ANY_ID, "verdict": "loved"},
        "invalid_request",
        "verdict must be one of used, ignored, contradicted",
    ),
    (
        "feedback",
        {"id": ANY_ID, "verdict": "contradicted"},
        "invalid_request",
        "note is required for 'contradicted'",
    ),
    ("feedback", {"id": ANY_ID, "verdict": "used"}, "not_found", f"memory {ANY_ID} not found"),
    (
        "list_memories",
        {"limit": 0},
        "invalid_request",
        "limit must be an integer between 1 and 100",
    ),
    ("list_memories", {"offset": -1}, "invalid_request", "offset must be a non-negative integer"),
    ("list_memories", {"pinned": "yes"}, "invalid_request", "pinned must be a boolean"),
    ("recall", {"query": "x", "tags": "git"}, "invalid_request", "tags must be a list of strings"),
    (
        "pipeline_status",
        {"verbose": True},
        "invalid_request",
        "unknown argument(s): verbose; pipeline_status takes no arguments",
    ),
]


def api_answer(client, method, path, body, auth) -> dict:
    """What the JSON API (in this process, on pytest's database) answers to the same request."""
    kwargs = (
        {"data": json.dumps(body), "content_type": "application/json"} if body is not None else {}
    )
    response = getattr(client, method)(path, **kwargs, **auth)
    assert response.status_code >= 400
    return response.json()


def test_bad_input_gets_the_json_apis_messages_and_writes_nothing(
    store, client, settings, ingest_auth, review_auth
):
    settings.MEMORY_MAX_CONTENT_CHARS = MAX_CHARS
    expected = [
        api_answer(client, method, path, body, ingest_auth if who == "ingest" else review_auth)
        for _, _, method, path, body, who in SAME_AS_API
    ]
    before = store.counts()

    async def steps(session, who):
        cases = [(tool, args) for tool, args, *_, token in SAME_AS_API if token == who]
        cases += [(tool, args) for tool, args, *_ in MCP_ONLY] if who == "review" else []
        return [await call_raw(session, tool, args) for tool, args in cases]

    # The review cases run with the admin token, which also holds 'ingest' for the MCP-only ones.
    answers = {
        who: stdio_session(store, store.tokens[token], lambda s, w=who: steps(s, w))
        for who, token in (("ingest", "ingest"), ("review", "admin"))
    }
    mcp = iter(answers["ingest"])
    reviewer = iter(answers["review"])
    for (tool, args, *_rest, who), api in zip(SAME_AS_API, expected, strict=True):
        payload, is_error = next(mcp if who == "ingest" else reviewer)
        assert is_error and payload == api, (tool, args)
    for (tool, args, code, message), (payload, is_error) in zip(MCP_ONLY, reviewer, strict=True):
        assert is_error and payload["error"] == code and message in payload["message"], (tool, args)
    assert store.counts() == before


# --- the README ----------------------------------------------------------------------------------


def test_the_readme_stdio_snippet_starts_a_working_server(store):
    configs = [
        c for c in readme_configs() for s in c.get("mcpServers", {}).values() if "command" in s
    ]
    assert configs, "the README shows no stdio configuration"
    (name, server), *_ = configs[0]["mcpServers"].items()
    placeholder = server["env"]["MEMORY_MCP_TOKEN"]
    assert placeholder.startswith("mcd_") and "python" in server["command"]
    command = server["command"].replace(PLACEHOLDER, str(BASE_DIR))
    args = [arg.replace(PLACEHOLDER, str(BASE_DIR)) for arg in server["args"]]
    assert command.endswith(".venv/bin/python") and args[-1] == "mcp"
    params = StdioServerParameters(
        # The README points at the project's virtualenv, which is where the tests run from.
        command=command if Path(command).exists() else PYTHON,
        args=args,
        # Anywhere but the project folder: agents start the server from their own directory.
        cwd=str(store.root),
        env={**store.env, **server["env"], "MEMORY_MCP_TOKEN": store.tokens["ingest"]},
    )

    async def steps(session):
        return [tool.name for tool in (await session.list_tools()).tools]

    assert set(over_stdio(params, steps, store.root / "readme.log")) == EXPECTED_TOOLS
