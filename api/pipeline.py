"""JSON API of the pipeline: jobs, proposals (list / approve / reject / revert) and the config.

A token sees and decides only its own agent's jobs and proposals (403 for another agent's, like
its memories), unless it was created multi-agent."""

from __future__ import annotations

from django.conf import settings
from django.http import JsonResponse

from api.auth import only_agent
from api.http import MAX_INT, BadRequest, api, bool_param, json_body, no_misspelt_fields, optional
from api.memory_service import require_agent, require_every_agent
from api.serializers import approvals_json, job_json, proposal_json
from memory.content import is_effectively_empty
from memory.models import ActorType, Job
from memory.moments import iso
from memory.reviewer_names import token_asserts
from memory.writes import Actor, Refused
from pipeline import review
from pipeline.config import ConfigError, config_json, get_config, mode_of
from pipeline.models import Action, Proposal, ProposalStatus

MAX_PAGE = 500
APPROVE_AS = (Action.ADD, Action.UPDATE, Action.DELETE)  # what an approval may apply instead
# The flags that make each mode (pipeline.config.effective_mode), for a PATCH that sends `mode`.
MODE_FLAGS = {
    "disabled": 'for "disabled" set enabled false',
    "shadow": 'for "shadow" set shadowMode true',
    "controlled-write": 'for "controlled-write" set shadowMode false and allowUpdateDelete false',
    "full": 'for "full" set shadowMode false and allowUpdateDelete true',
}
ANY_MODE = (
    "set enabled, shadowMode and allowUpdateDelete instead (the modes are disabled, shadow, "
    "controlled-write and full)"
)
APPROVE_FIELDS = {"content", "action", "note", "redecide", "force"}


@api(("GET",), None)
def job_detail(request, job_id: str):
    job = Job.objects.filter(id=job_id).select_related("memory").first()
    if job is None:
        raise Refused("not_found", f"job {job_id} not found")
    require_agent(request.api_token, job.memory.agent_id)
    return JsonResponse(job_json(job))


def _require_proposal_agent(request, proposal_id: str) -> None:
    """403 for another agent's proposal; a missing one is left to the action's own 404."""
    agent_id = Proposal.objects.filter(id=proposal_id).values_list("agent_id", flat=True).first()
    if agent_id is not None:
        require_agent(request.api_token, agent_id)


@api(("GET",), None)
def proposals(request):
    query = Proposal.objects.all()
    if (agent_id := only_agent(request.api_token)) is not None:
        query = query.filter(agent_id=agent_id)
    status = request.GET.get("status")
    if status:
        if status not in ProposalStatus.values:
            raise BadRequest(f"status must be one of {', '.join(ProposalStatus.values)}")
        query = query.filter(status=status)
    action = request.GET.get("action")
    if action:
        if action not in Action.values:
            raise BadRequest(f"action must be one of {', '.join(Action.values)}")
        query = query.filter(action=action)
    review_needed = bool_param(request, "reviewNeeded")
    if review_needed is not None:
        query = query.filter(review_needed=review_needed)
    if source := request.GET.get("sourceMemoryId"):
        query = query.filter(source_memory_id=source)
    if job := request.GET.get("jobId"):
        query = query.filter(job_id=job)
    try:
        limit = int(request.GET.get("limit", 100))
        offset = int(request.GET.get("offset", 0))
    except ValueError as exc:
        raise BadRequest("limit and offset must be integers") from exc
    if not 1 <= limit <= MAX_PAGE or not 0 <= offset <= MAX_INT:
        raise BadRequest(f"limit must be 1..{MAX_PAGE} and offset 0..{MAX_INT}")
    count = query.count()
    rows = query.order_by("created_at", "position").prefetch_related("approvals")[
        offset : offset + limit
    ]
    return JsonResponse({"proposals": [proposal_json(p) for p in rows], "count": count})


def _reviewer(request) -> Actor:
    """The token's reviewer; its edited text is a person's words only when a person holds the
    token or it has the `assert` scope (as for remember's assertedBy)."""
    token = request.api_token
    return Actor(token.reviewer_name, ActorType.OPERATOR, asserts=token_asserts(token))


@api(("POST",), "review")
def approve(request, proposal_id: str):
    _require_proposal_agent(request, proposal_id)
    body = no_misspelt_fields(json_body(request, allow_empty=True), APPROVE_FIELDS)
    content = optional(body, "content", str, "a string")
    if content is not None and len(content) > settings.MEMORY_MAX_CONTENT_CHARS:
        raise BadRequest("content is too long", 413, "too_large")
    if content is not None and is_effectively_empty(content):
        # Refused before the model call; the store's own gate refuses it on every other path.
        raise BadRequest("content is empty after normalisation")
    action = optional(body, "action", str, "one of add, update, delete")
    if action is not None and action not in APPROVE_AS:
        raise BadRequest("action must be one of add, update, delete")
    note = optional(body, "note", str, "a string")
    proposal = review.approve(
        proposal_id,
        _reviewer(request),
        content=content,
        action=action,
        note=note,
        redecide=bool(optional(body, "redecide", bool, "a boolean")),
        force=bool(optional(body, "force", bool, "a boolean")),
    )
    if proposal.awaiting_second_approval:
        # The two-person rule: this approval is recorded; a second reviewer's applies it.
        approvals = approvals_json(proposal)
        return JsonResponse(
            {"status": "awaiting_second_approval", "approvals": approvals}, status=202
        )
    return JsonResponse(proposal_json(proposal))


@api(("POST",), "review")
def reject(request, proposal_id: str):
    _require_proposal_agent(request, proposal_id)
    body = no_misspelt_fields(json_body(request, allow_empty=True), {"reason"})
    reason = optional(body, "reason", str, "a string")
    return JsonResponse(
        proposal_json(review.reject(proposal_id, _reviewer(request), reason=reason))
    )


@api(("POST",), "review")
def revert(request, proposal_id: str):
    """Revert an applied proposal ({reason?}); {undo: true} undoes an earlier revert instead."""
    _require_proposal_agent(request, proposal_id)
    body = no_misspelt_fields(json_body(request, allow_empty=True), {"reason", "undo"})
    reason = optional(body, "reason", str, "a string")
    undo = bool(optional(body, "undo", bool, "a boolean"))
    proposal = review.revert_once(proposal_id, _reviewer(request), undo=undo, reason=reason)
    return JsonResponse(
        {
            **proposal_json(proposal),
            "revertedAt": iso(proposal.reverted_at),
            "revertedBy": proposal.reverted_by,
        }
    )


@api(("POST",), "review")
def undo(request, proposal_id: str):
    """Take a decision back ({reason?}): the proposal is pending again (an applied change
    reverted, a rejection's suppression lifted), or this token's first approval withdrawn."""
    _require_proposal_agent(request, proposal_id)
    body = no_misspelt_fields(json_body(request, allow_empty=True), {"reason"})
    reason = optional(body, "reason", str, "a string")
    return JsonResponse(proposal_json(review.undo(proposal_id, _reviewer(request), reason=reason)))


@api(("GET", "PATCH"), "admin")
def pipeline_config(request):
    if request.method == "GET":
        return JsonResponse(config_json(get_config()))
    # Read by every agent's jobs and reviews: a token bound to one agent may not change it.
    require_every_agent(request.api_token, "a settings change", "governs every agent's pipeline")
    body = json_body(request)
    reason = body.pop("reason", None)
    if not isinstance(reason, str) or not reason.strip():
        raise BadRequest("reason is required", code="reason_required")
    # Derived from the flags, never set (ignored beside settings, as the answer's mode shows). Sent
    # alone, another mode is refused with the flags that make it: the refusal said "no settings".
    mode = body.pop("mode", None)
    body.pop("updatedAt", None)  # read-only; lets a client PATCH back what GET returned
    if not body and mode is not None and mode != mode_of(get_config()):
        hint = MODE_FLAGS.get(mode, ANY_MODE) if isinstance(mode, str) else ANY_MODE
        raise BadRequest(f"mode is read-only, derived from the flags: {hint}")
    try:
        return JsonResponse(
            review.update_config(body, changed_by=request.api_token.reviewer_name, reason=reason)
        )
    except ConfigError as exc:
        raise BadRequest(str(exc)) from exc
