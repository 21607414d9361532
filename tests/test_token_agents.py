"""Tokens are bound to their agent (issue 10, item 12): another agent's memories are refused with
403 through the JSON API and the MCP tools alike, unless an admin created the token multi-agent;
the audit names the token whatever `who` says."""

import json

import pytest
from django.core.management import call_command
from mcp.shared.exceptions import MCPError

from api.auth import create_token
from api.mcp_server import list_memory_resources, read_memory_resource, run_tool
from memory.models import ApiToken, Memory, MemoryHistory
from memory.writes import Actor, forget, remember
from pipeline.models import Proposal
from pipeline.tasks import process_pending

pytestmark = pytest.mark.django_db


def bearer(plain: str) -> dict:
    return {"HTTP_AUTHORIZATION": f"Bearer {plain}"}


def post(client, url, body, auth):
    return client.post(url, json.dumps(body), content_type="application/json", **auth)


@pytest.fixture
def tokens(db):
    """An ingest+review token of agent 'default', and a multi-agent one of the same agent."""
    _, bound = create_token("bound-bot", scopes=["ingest", "review"])
    _, multi = create_token("fleet-bot", scopes=["ingest", "review"], multi_agent=True)
    return {"bound": bound, "multi": multi}


@pytest.fixture
def ops_memory(db):
    return remember(
        "The ops runbook lives in the wiki.", actor=Actor("ops", "agent"), agent_id="ops"
    )


def test_a_token_cannot_remember_into_another_agent(client, tokens):
    response = post(
        client,
        "/api/memory/remember",
        {"content": "Planted into the ops agent.", "agentId": "ops"},
        bearer(tokens["bound"]),
    )
    assert response.status_code == 403
    body = response.json()
    assert (
        body["error"] == "forbidden"
        and "'default'" in body["message"]
        and "'ops'" in body["message"]
    )
    assert not Memory.objects.exists()


def test_naming_its_own_agent_is_fine(client, tokens):
    response = post(
        client,
        "/api/memory/remember",
        {"content": "Written for my own agent.", "agentId": "default"},
        bearer(tokens["bound"]),
    )
    assert response.status_code == 201


def test_a_token_cannot_recall_or_list_another_agents_memories(client, tokens, ops_memory):
    auth = bearer(tokens["bound"])
    recall = post(client, "/api/memory/recall", {"query": "ops runbook", "agentId": "ops"}, auth)
    assert recall.status_code == 403 and recall.json()["error"] == "forbidden"


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("get", "", None),
        ("get", "/history", None),
        ("patch", "", {"content": "Rewritten by a stranger.", "reason": "x"}),
        ("delete", "", {"reason": "x"}),
    ],
)
def test_a_token_cannot_touch_another_agents_memory_by_id(
    client, tokens, ops_memory, method, path, body
):
    url = f"/api/memory/{ops_memory.memory.id}{path}"
    kwargs = {"content_type": "application/json", **bearer(tokens["bound"])}
    if body is not None:
        kwargs["data"] = json.dumps(body)
    response = getattr(client, method)(url, **kwargs)
    assert response.status_code == 403 and response.json()["error"] == "forbidden"
    memory = Memory.objects.get(id=ops_memory.memory.id)
    assert (memory.version, memory.is_deleted) == (1, False)


def test_recover_is_refused_for_another_agents_memory(client, tokens, ops_memory):
    forget(ops_memory.memory.id, actor=Actor("ops", "agent"), reason="gone")
    response = post(
        client, f"/api/memory/{ops_memory.memory.id}/recover", {}, bearer(tokens["bound"])
    )
    assert response.status_code == 403
    assert Memory.objects.get(id=ops_memory.memory.id).is_deleted


def test_a_multi_agent_token_acts_for_any_agent_and_the_audit_names_the_token(client, tokens):
    auth = bearer(tokens["multi"])
    response = post(
        client,
        "/api/memory/remember",
        {"content": "The ops pager rotates weekly.", "agentId": "ops", "who": "someone-else"},
        auth,
    )
    assert response.status_code == 201
    memory = Memory.objects.get(id=response.json()["id"])
    assert (memory.agent_id, memory.who) == ("ops", "someone-else")
    created = MemoryHistory.objects.get(memory=memory, event="created")
    assert created.changed_by == "fleet-bot"  # `who` is free; the audit records the token
    assert client.get(f"/api/memory/{memory.id}", **auth).status_code == 200
    recall = post(client, "/api/memory/recall", {"query": "pager", "agentId": "ops"}, auth)
    assert recall.status_code == 200


def test_the_command_binds_a_token_and_multi_agent_is_an_explicit_choice(capsys):
    call_command("create_api_token", "ops-agent", "--agent", "ops")
    call_command("create_api_token", "fleet", "--agent", "ops", "--multi-agent")
    bound, fleet = ApiToken.objects.get(name="ops-agent"), ApiToken.objects.get(name="fleet")
    assert (bound.agent_id, bound.multi_agent) == ("ops", False)
    assert (fleet.agent_id, fleet.multi_agent) == ("ops", True)
    assert "multi-agent" in capsys.readouterr().out


# --- the MCP tools share the rule through api.memory_service --------------------------------------


@pytest.mark.parametrize(
    ("tool", "args"),
    [
        ("get_memory", {}),
        ("memory_history", {}),
        ("modify", {"reason": "x", "content": "Rewritten over MCP."}),
        ("forget", {"reason": "x"}),
        ("feedback", {"verdict": "used"}),
    ],
)
def test_mcp_tools_refuse_another_agents_memory(tokens, ops_memory, tool, args):
    memory_id = ops_memory.memory.id
    payload, is_error = run_tool(
        tool, {"id": memory_id, **args}, f"Bearer {tokens['bound']}", "test-client"
    )
    assert is_error and payload["error"] == "forbidden"
    assert MemoryHistory.objects.filter(memory_id=memory_id).count() == 1  # only "created"
    assert Memory.objects.get(id=memory_id).version == 1


def test_the_mcp_resource_list_shows_the_tokens_agents_live_memories(tokens, ops_memory):
    own = remember("The deploy runbook lives in the handbook.", actor=Actor("me", "agent"))
    gone = remember("An outdated note about the VPN.", actor=Actor("me", "agent"))
    forget(gone.memory.id, actor=Actor("me", "agent"), reason="outdated")
    listed = list_memory_resources(f"Bearer {tokens['bound']}")
    assert [(str(r.uri), r.title) for r in listed] == [
        (f"memory://{own.memory.id}", "The deploy runbook lives in the handbook.")
    ]


def test_the_mcp_memory_resource_refuses_another_agents_memory(tokens, ops_memory):
    with pytest.raises(MCPError):
        read_memory_resource(f"memory://{ops_memory.memory.id}", f"Bearer {tokens['bound']}")
    shown = json.loads(
        read_memory_resource(f"memory://{ops_memory.memory.id}", f"Bearer {tokens['multi']}")
    )
    assert shown["memory"]["agentId"] == "ops"


# --- the pipeline API: jobs and proposals belong to their memory's agent --------------------------


def raw_with_two_facts(agent_id: str, topic: str):
    """A raw memory whose facts differ from its own text, so they are proposals, not duplicates."""
    return remember(
        f"The {topic} pager rotates weekly. The {topic} runbook is kept in the wiki.",
        actor=Actor(topic, "agent"),
        agent_id=agent_id,
    )


@pytest.fixture
def ops_job(db):
    return raw_with_two_facts("ops", "ops").job


@pytest.fixture
def ops_proposal(ops_job):
    """The ops job run in shadow mode (a fresh install): its proposals wait for review."""
    process_pending()
    proposal = Proposal.objects.filter(agent_id="ops", status="pending").first()
    assert proposal is not None
    return proposal


def test_a_token_lists_only_its_own_agents_proposals(client, tokens, ops_proposal):
    own = raw_with_two_facts("default", "deploy")
    process_pending()
    assert Proposal.objects.filter(agent_id="default").exists()
    bound = client.get("/api/proposals", **bearer(tokens["bound"])).json()
    assert bound["count"] > 0
    assert {row["agentId"] for row in bound["proposals"]} == {"default"}
    assert {row["sourceMemoryId"] for row in bound["proposals"]} == {own.memory.id}
    fleet = client.get("/api/proposals", **bearer(tokens["multi"])).json()
    assert {row["agentId"] for row in fleet["proposals"]} == {"default", "ops"}


def test_a_token_cannot_read_another_agents_job(client, tokens, ops_job):
    url = f"/api/jobs/{ops_job.id}"
    refused = client.get(url, **bearer(tokens["bound"]))
    assert refused.status_code == 403 and refused.json()["error"] == "forbidden"
    assert client.get(url, **bearer(tokens["multi"])).status_code == 200


@pytest.mark.parametrize("action", ["approve", "reject", "revert"])
def test_a_review_token_cannot_decide_another_agents_proposal(client, tokens, ops_proposal, action):
    url = f"/api/proposals/{ops_proposal.id}/{action}"
    response = post(client, url, {"reason": "not mine"}, bearer(tokens["bound"]))
    assert response.status_code == 403 and response.json()["error"] == "forbidden"
    ops_proposal.refresh_from_db()
    assert (ops_proposal.status, ops_proposal.decided_by) == ("pending", None)


def test_a_multi_agent_review_token_may_decide_another_agents_proposal(
    client, tokens, ops_proposal
):
    url = f"/api/proposals/{ops_proposal.id}/reject"
    response = post(client, url, {"reason": "fleet review"}, bearer(tokens["multi"]))
    assert response.status_code == 200 and response.json()["status"] == "rejected"
