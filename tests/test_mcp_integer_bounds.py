"""Every integer argument of every MCP tool is bounded like the JSON API's (api.http.MAX_INT): a
huge offset, limit, version or number is `invalid_request` with nothing written, never a server
error (issue 20, item 11). Direct calls of the tool runner, the stdio and HTTP transports' core."""

import pytest

from api.http import MAX_INT
from api.mcp_server import TOOLS, run_tool
from memory import writes
from memory.models import Memory, MemoryHistory

pytestmark = pytest.mark.django_db

HUGE = [2**63, -(2**63), 2**64 + 1, MAX_INT + 1, 10**400]


@pytest.fixture
def call():
    from api.auth import create_token

    _, plain = create_token("mcp-agent", scopes=["ingest", "review", "admin"])

    def call(name, arguments):
        return run_tool(name, arguments, f"Bearer {plain}", "test-client")

    return call


def state():
    return (
        list(Memory.objects.order_by("id").values_list("id", "version", "is_deleted")),
        MemoryHistory.objects.count(),
    )


def test_list_memories_with_offset_two_to_the_63_is_an_invalid_request(call):
    payload, is_error = call("list_memories", {"offset": 2**63})
    assert is_error and payload["error"] == "invalid_request", payload
    assert str(MAX_INT) in payload["message"]


@pytest.mark.parametrize("value", HUGE)
def test_every_numeric_argument_of_every_tool_is_bounded(call, value):
    memory = writes.remember("Bounded integers are good.", actor=writes.Actor("a", "agent")).memory
    before = state()
    numeric = [
        (name, key)
        for name, spec in TOOLS.items()
        for key, schema in spec.properties.items()
        if schema.get("type") in ("integer", "number")
    ]
    assert {key for _, key in numeric} >= {"limit", "offset", "ifVersion", "importance"}
    for name, key in numeric:
        base = {
            "remember": {"content": "A new memory."},
            "recall": {"query": "integers"},
            "modify": {"id": memory.id, "reason": "bounds", "content": "Changed."},
            "forget": {"id": memory.id, "reason": "bounds"},
        }.get(name, {})
        payload, is_error = call(name, {**base, key: value})
        assert is_error and payload["error"] == "invalid_request", (name, key, payload)
    assert state() == before


def test_an_integer_nested_in_a_list_argument_is_bounded_too(call):
    payload, is_error = call("remember", {"content": "Tagged.", "tags": [2**63]})
    assert is_error and payload["error"] == "invalid_request", payload
    assert not Memory.objects.exists()


def test_the_largest_integer_allowed_still_works(call):
    payload, is_error = call("list_memories", {"offset": MAX_INT})
    assert not is_error and payload["memories"] == [] and payload["nextOffset"] is None


def test_the_shared_validation_bounds_offset_and_if_version_for_every_caller(db):
    from api import memory_service
    from api.auth import create_token
    from api.http import BadRequest

    token, _ = create_token("direct", scopes=["ingest"])
    with pytest.raises(BadRequest, match=str(MAX_INT)):
        memory_service.list_memories(token, {"offset": 2**63})
    with pytest.raises(BadRequest, match=str(MAX_INT)):
        memory_service.if_version_field({"ifVersion": 2**63})
