"""JSON API of redaction (review scope; not an MCP tool): `POST /api/memory/{id}/redact` with
{span, kind, reason, proposalId?} replaces the span by `[redacted:<kind>]` in the memory, its
family and every copy, and answers 200 with the receipt (pipeline.redaction.Receipt.as_json).
Validation of the JSON lives here; what may be redacted is pipeline.redaction's."""

from __future__ import annotations

from django.http import JsonResponse

from api.auth import scope_refusal
from api.http import api, json_body, known_fields, optional
from api.memory_service import memory_or_404, require_every_agent
from memory.models import ActorType
from memory.writes import Actor
from pipeline import review
from pipeline.redaction import Request

FIELDS = {"span", "kind", "reason", "proposalId"}


@api(("POST",), "review")
def redact_memory(request, memory_id: str):
    token = request.api_token
    require_every_agent(token, "a redaction")
    body = known_fields(json_body(request), FIELDS)
    memory = memory_or_404(token, memory_id)
    asked = Request(
        memory.id,
        optional(body, "span", str, "a string") or "",
        optional(body, "kind", str, "a string") or "",
        optional(body, "proposalId", str, "a string"),
        # An admin token may redact any span, a review token a safety finding's only.
        any_span=scope_refusal(token, "admin") is None,
    )
    receipt = review.redact(
        asked,
        reason=optional(body, "reason", str, "a string"),
        actor=Actor(token.reviewer_name, ActorType.OPERATOR),
    )
    return JsonResponse(receipt.as_json())
