"""JSON API of purge (admin scope; not an MCP tool): `POST /api/memory/{id}/purge` with
{reason, lineage, dryRun} purges one memory or a raw memory with its lineage, `POST /api/purge`
with {agent} or {text} plus {reason, dryRun} every memory of an agent or every memory holding a
text. Both answer 200 with the erasure receipt (pipeline.purge.Receipt.as_json); a dry run writes
nothing. Both need a token that may act for any agent (a purge looks for copies in every agent's
data). Validation lives here: this API is the only program that purges."""

from __future__ import annotations

from django.http import JsonResponse

from api.http import BadRequest, api, json_body, known_fields, optional
from api.memory_service import require_every_agent
from memory.models import ActorType
from memory.writes import Actor
from pipeline import review
from pipeline.purge import Request, Scope

MEMORY_FIELDS = {"reason", "lineage", "dryRun"}
STORE_FIELDS = {"agent", "text", "reason", "dryRun"}


def _receipt(request, purge: Request, body: dict) -> JsonResponse:
    dry_run = bool(optional(body, "dryRun", bool, "true or false"))
    token = request.api_token
    receipt = review.purge(
        purge,
        reason=optional(body, "reason", str, "a string"),
        actor=Actor(token.reviewer_name, ActorType.OPERATOR),
        dry_run=dry_run,
    )
    return JsonResponse(receipt.as_json())


@api(("POST",), "admin")
def purge_memory(request, memory_id: str):
    require_every_agent(request.api_token, "a purge")
    body = json_body(request)
    known_fields(body, MEMORY_FIELDS)
    lineage = bool(optional(body, "lineage", bool, "true or false"))
    scope = Scope.LINEAGE if lineage else Scope.MEMORY
    return _receipt(request, Request(scope, memory_id=memory_id), body)


@api(("POST",), "admin")
def purge_store(request):
    require_every_agent(request.api_token, "a purge")
    body = json_body(request)
    known_fields(body, STORE_FIELDS)
    agent = optional(body, "agent", str, "a string")
    text = optional(body, "text", str, "a string")
    if (agent is None) == (text is None):
        raise BadRequest(
            "give exactly one of agent (every memory of that agent) or text (every memory "
            "holding it)",
            code="invalid_scope",
        )
    purge = (
        Request(Scope.AGENT, agent=agent) if agent is not None else Request(Scope.TEXT, text=text)
    )
    return _receipt(request, purge, body)
