"""The memory operations behind both doors for programs: the JSON API views and the MCP tools.

Each function takes the caller's token and a JSON-like dict, validates it (BadRequest with the
API's messages, before anything is written), calls the store or the pipeline and returns the JSON
shape of DESIGN §7. Refusals of the store (`Refused`) pass through for the caller to report.
"""

from __future__ import annotations

from datetime import datetime

from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from api.auth import has_scope, may_act_for, scope_refusal
from api.http import MAX_INT, BadRequest, optional
from api.serializers import history_json, memory_json, proposal_json
from memory import expiry, writes
from memory.content import is_effectively_empty
from memory.feedback import FEEDBACK_VERDICTS, record_feedback
from memory.filters import attributes
from memory.models import (
    DERIVED_SOURCE_TYPE,
    ActorType,
    ApiToken,
    Authority,
    Job,
    JobStatus,
    Memory,
    MemoryHistory,
)
from memory.moments import iso
from memory.writes import Actor, Refused, Triple
from pipeline import memory_ops
from pipeline.config import get_config, mode_of
from pipeline.models import Proposal, ProposalStatus

LIST_MAX = 100
FEEDBACK_NOTE_CHARS = 2000
# Limits of list fields: each triple is several writes inside remember's transaction, so an
# unbounded list would hold the write lock for everyone (documented in the README).
MAX_TAGS = 50
TAG_CHARS = 100
MAX_TRIPLES = 50
TRIPLE_NAME_CHARS = 200
TRIPLE_TYPE_CHARS = 40
CHANGED_BY_CHARS = MemoryHistory._meta.get_field("changed_by").max_length


def require_scope(token: ApiToken, scope: str) -> None:
    if (refused := scope_refusal(token, scope)) is not None:
        raise BadRequest(refused, 403, "forbidden")


def actor(token: ApiToken, body: dict | None = None, default_type: str = ActorType.AGENT) -> Actor:
    """Who a change is by: an agent's write is its token's; an operator's edit, forget or
    recover through a token with a holder is "<holder> via <token>" (the person, and the token
    that carried it: after a leak its changes are told apart from the dashboard's). An explicit
    changedBy names who asked, before them: "<changedBy> via <holder> via <token>" (the holder
    stays accountable). At most the column's 200 characters, the token's part kept whole."""
    name = token.name
    if default_type == ActorType.OPERATOR and token.owner:
        name = f"{token.owner} via {token.name}"
    if body and isinstance(body.get("changedBy"), str) and body["changedBy"].strip():
        asked = body["changedBy"].strip()[:80]
        name = f"{asked[: max(0, CHANGED_BY_CHARS - len(name) - 5)]} via {name}"
    return Actor(name[-CHANGED_BY_CHARS:], default_type)


# --- validation of body fields --------------------------------------------------------------------


def content_field(body: dict, *, required: bool) -> str | None:
    if "content" not in body or body["content"] is None:
        if required:
            raise BadRequest("content is required")
        return None
    content = body["content"]
    if not isinstance(content, str):
        raise BadRequest("content must be a string")
    if len(content) > settings.MEMORY_MAX_CONTENT_CHARS:
        raise BadRequest(
            f"content is longer than {settings.MEMORY_MAX_CONTENT_CHARS} characters",
            413,
            "too_large",
        )
    if is_effectively_empty(content):
        raise BadRequest("content is empty after normalisation")
    return content


def tags_field(body: dict) -> list[str] | None:
    tags = body.get("tags")
    if tags is None:
        return None
    if not isinstance(tags, list) or not all(isinstance(tag, str) for tag in tags):
        raise BadRequest("tags must be a list of strings")
    if len(tags) > MAX_TAGS:
        raise BadRequest(f"tags may hold at most {MAX_TAGS} items, not {len(tags)}")
    if any(len(tag) > TAG_CHARS for tag in tags):
        raise BadRequest(f"each tag must be at most {TAG_CHARS} characters")
    return [tag.strip() for tag in tags if tag.strip()]


def importance_field(body: dict) -> float | None:
    value = optional(body, "importance", (int, float), "a number between 0 and 1")
    if value is not None and not 0 <= value <= 1:
        raise BadRequest("importance must be a number between 0 and 1")
    return None if value is None else float(value)


def triples_field(body: dict) -> list[Triple]:
    entities = body.get("entities")
    if entities is None:
        return []
    if not isinstance(entities, list):
        raise BadRequest("entities must be a list of {source, relationship, target} objects")
    if len(entities) > MAX_TRIPLES:
        raise BadRequest(f"entities may hold at most {MAX_TRIPLES} triples, not {len(entities)}")
    triples = []
    for index, item in enumerate(entities):
        if not isinstance(item, dict):
            raise BadRequest(f"entities[{index}] must be an object")
        values = {}
        for key in ("source", "relationship", "target"):
            value = item.get(key)
            if not isinstance(value, str) or not value.strip():
                raise BadRequest(f"entities[{index}].{key} must be a non-empty string")
            if len(value) > TRIPLE_NAME_CHARS:
                raise BadRequest(
                    f"entities[{index}].{key} must be at most {TRIPLE_NAME_CHARS} characters"
                )
            values[key] = value.strip()
        for key in ("sourceType", "targetType"):
            if item.get(key) is not None and not isinstance(item[key], str):
                raise BadRequest(f"entities[{index}].{key} must be a string")
            if len(item.get(key) or "") > TRIPLE_TYPE_CHARS:
                raise BadRequest(
                    f"entities[{index}].{key} must be at most {TRIPLE_TYPE_CHARS} characters"
                )
        confidence = item.get("confidence", 0.9)
        if isinstance(confidence, bool) or not isinstance(confidence, int | float):
            raise BadRequest(f"entities[{index}].confidence must be a number")
        triples.append(
            Triple(
                source=values["source"],
                relationship=values["relationship"],
                target=values["target"],
                source_type=(item.get("sourceType") or "unknown").strip() or "unknown",
                target_type=(item.get("targetType") or "unknown").strip() or "unknown",
                confidence=max(0.0, min(1.0, float(confidence))),
            )
        )
    return triples


def short_string(body: dict, key: str, limit: int = 200) -> str | None:
    value = optional(body, key, str, "a string")
    if value is not None and len(value) > limit:
        raise BadRequest(f"{key} must be at most {limit} characters")
    return value


def type_field(body: dict) -> str | None:
    """A memory's type, surrounding blanks taken off (then at most 40 characters); None when
    unsaid. A blank one (invisible characters too) is a 400: it was stored as is, and no type
    filter could find the memory again."""
    value = optional(body, "type", str, "a string")
    if value is None:
        return None
    if is_effectively_empty(value):
        raise BadRequest("type must not be blank: leave it out (remember stores 'fact')")
    return short_string({"type": value.strip()}, "type", 40)


def source_type_field(body: dict) -> str:
    """Where a remembered memory came from, as its writer names it ("manual" when unsaid). The
    pipeline's own name is refused: a memory under it counts as derived from its sourceId, so
    a caller could hang a memory of its agent on another agent's (a purge or a redaction of
    that lineage then reached it)."""
    value = short_string(body, "sourceType", 40) or "manual"
    if value.strip().lower() == DERIVED_SOURCE_TYPE:
        raise BadRequest(
            f"sourceType '{DERIVED_SOURCE_TYPE}' is reserved for the memories the pipeline "
            "derives: name your own source (manual, chat, import, ...)",
            code="reserved_source_type",
        )
    return value


# What a remember may say about who asserted it: an agent (the default), or a person whose
# explicit instruction the agent relays, which needs the `assert` scope.
ASSERTABLE = (Authority.AGENT, Authority.PERSON)


def asserted_by_field(token: ApiToken, body: dict) -> str:
    value = optional(body, "assertedBy", str, "a string")
    if value is None:
        return Authority.AGENT
    if value not in ASSERTABLE:
        raise BadRequest(f"assertedBy must be one of: {', '.join(ASSERTABLE)}")
    if value == Authority.PERSON and not has_scope(token, "assert"):
        raise BadRequest(
            "assertedBy \"person\" needs a token with the 'assert' scope: create one with "
            "manage.py create_api_token --scopes ingest,assert",
            403,
            "forbidden",
        )
    if value == Authority.PERSON and (refused := scope_refusal(token, "assert")) is not None:
        raise BadRequest(f'assertedBy "person": {refused}', 403, "forbidden")
    return value


def expires_at_field(body: dict, *, past: bool) -> datetime | None:
    """expiresAt as a moment in UTC (None when absent or null). ISO 8601 with a time zone; a
    moment already gone is taken only with `past` (an edit that expires a memory now): remember
    refuses it, as a memory that expired before it was stored could never be recalled."""
    value = body.get("expiresAt")
    if value is None:
        return None
    try:
        moment = expiry.parse(value)
    except expiry.BadExpiry as exc:
        raise BadRequest(str(exc)) from None
    if not past and moment <= timezone.now():
        raise BadRequest(
            f"expiresAt {iso(moment)} is in the past: the memory would never be "
            "recalled (give a moment to come, or leave expiresAt out for no expiry)",
            code="expiry_in_past",
        )
    return moment


def if_version_field(body: dict) -> int | None:
    value = optional(body, "ifVersion", int, "a positive integer")
    if value is not None and not 1 <= value <= MAX_INT:
        raise BadRequest(f"ifVersion must be a positive integer up to {MAX_INT}")
    return value


def reason_field(body: dict) -> str:
    reason = optional(body, "reason", str, "a string")
    if not reason or not reason.strip():
        raise BadRequest("reason is required", code="reason_required")
    return reason.strip()


def flag(value) -> bool:
    """A query parameter read as a yes or no: true, 1 or yes (JSON bodies take a boolean)."""
    return value is True or (isinstance(value, str) and value.lower() in {"1", "true", "yes"})


def limit_field(body: dict, default: int, maximum: int) -> int:
    limit = optional(body, "limit", int, f"an integer between 1 and {maximum}")
    limit = default if limit is None else limit
    if not 1 <= limit <= maximum:
        raise BadRequest(f"limit must be an integer between 1 and {maximum}")
    return limit


def agent_of(token: ApiToken, body: dict) -> str:
    """The agent whose memories a call reads or writes: agentId when given, else the token's.
    Another agent than the token's needs a multi-agent token (403 otherwise)."""
    agent_id = short_string(body, "agentId") or token.agent_id
    require_agent(token, agent_id)
    return agent_id


def require_agent(token: ApiToken, agent_id: str) -> None:
    """403 unless the token may act for `agent_id` (its own agent, or any with a multi-agent token)."""
    if not may_act_for(token, agent_id):
        raise BadRequest(
            f"this token belongs to agent '{token.agent_id}' and may not act for agent "
            f"'{agent_id}' (an admin can create a multi-agent token: create_api_token --multi-agent)",
            403,
            "forbidden",
        )


ERASURE_REACH = "looks for copies in every agent's data and rewrites them"


def require_every_agent(token: ApiToken, doing: str, because: str = ERASURE_REACH) -> None:
    """403 unless the token may act for any agent: an erasure looks for copies of its text in
    every agent's data and rewrites them, and its answer (found, repaired, the rows it would
    write) would tell a token of one agent what the others hold; a settings change governs
    every agent's pipeline (`because` says which)."""
    if not token.multi_agent:
        raise BadRequest(
            f"{doing} {because}, and this token "
            f"belongs to agent '{token.agent_id}': use a token that may act for any agent "
            "(create_api_token --multi-agent)",
            403,
            "forbidden",
        )


def memory_or_404(token: ApiToken, memory_id: str) -> Memory:
    """The memory, if it exists (404) and belongs to an agent the token may act for (403)."""
    memory = Memory.objects.filter(id=memory_id).first()
    if memory is None:
        raise Refused("not_found", f"memory {memory_id} not found")
    require_agent(token, memory.agent_id)
    return memory


# --- filters shared by list and recall -----------------------------------------------------------


def filters_field(body: dict) -> dict:
    """Optional filters: type, who (substring), tags (all of them), pinned, includeDeleted,
    includeExpired (the last two for lists: recall never finds either)."""
    # As remember stores it: " preference " finds "preference"; a blank one filters nothing.
    typed = (optional(body, "type", str, "a string") or "").strip()
    return {
        "type": short_string({"type": typed}, "type", 40) if typed else None,
        "who": short_string(body, "who"),
        "tags": tags_field(body) or [],
        "pinned": optional(body, "pinned", bool, "a boolean"),
        "include_deleted": bool(optional(body, "includeDeleted", bool, "a boolean")),
        "include_expired": bool(optional(body, "includeExpired", bool, "a boolean")),
    }


def filter_q(filters: dict) -> Q:
    """The filters but includeDeleted as one Q on Memory (what recall pushes into the search)."""
    return attributes(
        type=filters["type"], who=filters["who"], pinned=filters["pinned"], tags=filters["tags"]
    )


def filtered(agent_id: str, filters: dict):
    query = Memory.objects.filter(agent_id=agent_id)
    if not filters["include_deleted"]:
        query = query.filter(is_deleted=False)
    if not filters["include_expired"]:
        query = query.filter(expiry.unexpired())
    return query.filter(filter_q(filters))


# --- operations -----------------------------------------------------------------------------------


def remember(token: ApiToken, body: dict) -> tuple[dict, bool]:
    """Raw-first remember; returns the answer and whether it was a duplicate of a live memory."""
    require_scope(token, "ingest")
    content = content_field(body, required=True)
    asserted_by = asserted_by_field(token, body)
    pinned = optional(body, "pinned", bool, "a boolean")
    importance = importance_field(body)
    result = writes.remember(
        content,
        actor=actor(token),
        who=short_string(body, "who"),
        why=short_string(body, "why") or "",
        type=type_field(body) or "fact",
        agent_id=agent_of(token, body),
        pinned=bool(pinned),
        importance=0.5 if importance is None else importance,
        tags=tags_field(body),
        source_type=source_type_field(body),
        source_id=short_string(body, "sourceId"),
        triples=triples_field(body),
        asserted_by=asserted_by,
        expires_at=expires_at_field(body, past=False),
    )
    memory = result.memory
    payload = {
        "id": memory.id,
        "contentHash": memory.content_hash,
        "deduped": result.deduped,
        "jobId": result.job.id if result.job else None,
        "linkedEntityIds": result.linked_entity_ids,
    }
    return payload, result.deduped


def get_memory(token: ApiToken, memory_id: str) -> dict:
    return memory_json(memory_or_404(token, memory_id))


def history(token: ApiToken, memory_id: str) -> dict:
    memory = memory_or_404(token, memory_id)
    rows = memory.history.order_by("created_at", "id")
    every_agent = token.multi_agent
    history = [history_json(row, every_agent=every_agent) for row in rows]
    return {"memoryId": memory.id, "history": history}


def modify(token: ApiToken, memory_id: str, body: dict) -> dict:
    """Edit a memory ({reason, content?, type?, tags?, importance?, pinned?, expiresAt?,
    ifVersion?}); expiresAt null lifts the expiry, a past moment expires the memory now."""
    require_scope(token, "review")
    reason = reason_field(body)
    content = content_field(body, required=False)
    changes = {
        "content": content,
        "type": type_field(body),
        "tags": tags_field(body),
        "importance": importance_field(body),
        "pinned": optional(body, "pinned", bool, "a boolean"),
    }
    if "expiresAt" not in body and all(value is None for value in changes.values()):
        raise BadRequest(
            "nothing to change: give content, type, tags, importance, pinned or expiresAt"
        )
    if "expiresAt" in body:
        changes["expires_at"] = expires_at_field(body, past=True)
    changes["asserted_by"] = Authority.AGENT  # a new text through the API is the caller's
    if_version = if_version_field(body)
    memory = memory_or_404(token, memory_id)
    try:
        memory = memory_ops.modify(
            memory,
            changes,
            actor=actor(token, body, ActorType.OPERATOR),
            reason=reason,
            if_version=if_version,
        )
    except Refused as refused:
        if refused.code == "no_changes":
            return {"id": memory_id, "status": "no_changes", **refused.details}
        raise
    return {"status": "updated", "memory": memory_json(memory), **memory_json(memory)}


def forget(token: ApiToken, memory_id: str, body: dict) -> dict:
    """Soft delete ({reason, force?, ifVersion?}); a pinned memory needs force."""
    require_scope(token, "review")
    reason = body.get("reason")
    if not isinstance(reason, str) or not reason.strip():
        raise BadRequest("reason is required", code="reason_required")
    # A JSON true only (a query parameter is read by the view): "yes" force-deleted a pinned one.
    force = bool(optional(body, "force", bool, "true or false"))
    if_version = if_version_field(body)
    memory_or_404(token, memory_id)
    memory = writes.forget(
        memory_id,
        actor=actor(token, body, ActorType.OPERATOR),
        reason=reason.strip(),
        force=force,
        if_version=if_version,
    )
    return {"id": memory.id, "status": "deleted", "version": memory.version}


def recover(token: ApiToken, memory_id: str, body: dict) -> dict:
    require_scope(token, "review")
    reason = optional(body, "reason", str, "a string") or "recovered through the API"
    if_version = if_version_field(body)
    memory_or_404(token, memory_id)
    memory = writes.recover(
        memory_id,
        actor=actor(token, body, ActorType.OPERATOR),
        reason=reason.strip(),
        if_version=if_version,
    )
    return {"id": memory.id, "status": "recovered", "version": memory.version}


def recall(token: ApiToken, body: dict, filters: dict | None = None) -> dict:
    """Hybrid search of one agent's live memories ({query, limit?, agentId?, type?, who?, tags?,
    pinned?}), best first."""
    query = optional(body, "query", str, "a string")
    if not query or not query.strip():
        raise BadRequest("query is required")
    if len(query) > settings.MEMORY_MAX_CONTENT_CHARS:
        raise BadRequest("query is too long", 413, "too_large")
    limit = limit_field(body, 10, 100)
    agent_id = agent_of(token, body)
    # The filters (MCP's, or the body's type/who/tags/pinned) go into the search itself: filtering
    # its first hits afterwards answered nothing while matches existed further down.
    where = filter_q(filters if filters is not None else filters_field(body))
    recalled = memory_ops.recall(query, [agent_id], k=limit, where=where or None)
    hits = recalled.hits
    # A memory purged between the search and this read is left out, not a KeyError.
    found = Memory.objects.in_bulk([hit.memory_id for hit in hits])
    results = [
        {
            **memory_json(found[hit.memory_id]),
            "score": round(hit.score, 4),
            "keywordScore": None if hit.keyword_score is None else round(hit.keyword_score, 4),
            "vectorScore": None if hit.vector_score is None else round(hit.vector_score, 4),
        }
        for hit in hits
        if hit.memory_id in found
    ]
    warnings = (
        ["embedding server unavailable: keyword results only"] if recalled.keyword_only else []
    )
    return {
        "query": query,
        "results": results,
        "warnings": warnings,
        "degraded": "keyword_only" if recalled.keyword_only else None,
    }


def list_memories(token: ApiToken, body: dict) -> dict:
    """One page of an agent's memories, newest first ({filters, limit?, offset?})."""
    filters = filters_field(body)
    limit = limit_field(body, 20, LIST_MAX)
    offset = optional(body, "offset", int, "a non-negative integer")
    offset = 0 if offset is None else offset
    if not 0 <= offset <= MAX_INT:  # also for callers that did not come through a bounded parser
        raise BadRequest(f"offset must be a non-negative integer up to {MAX_INT}")
    query = filtered(agent_of(token, body), filters)
    count = query.count()
    rows = list(query.order_by("-created_at", "-id")[offset : offset + limit])
    next_offset = offset + len(rows) if offset + len(rows) < count else None
    return {
        "memories": [memory_json(memory) for memory in rows],
        "count": count,
        "limit": limit,
        "offset": offset,
        "nextOffset": next_offset,
    }


def feedback(token: ApiToken, memory_id: str, body: dict, metadata: dict | None = None) -> dict:
    """An agent's report on a recalled memory ({verdict: used|ignored|contradicted, note?})."""
    require_scope(token, "ingest")
    verdict = optional(body, "verdict", str, "one of " + ", ".join(FEEDBACK_VERDICTS))
    if verdict not in FEEDBACK_VERDICTS:
        raise BadRequest(f"verdict must be one of {', '.join(FEEDBACK_VERDICTS)}")
    note = short_string(body, "note", FEEDBACK_NOTE_CHARS)
    note = note.strip() if note else ""
    if verdict == "contradicted" and not note:
        raise BadRequest("note is required for 'contradicted': say what contradicts the memory")
    memory_or_404(token, memory_id)
    row = record_feedback(
        memory_id,
        actor=actor(token),
        verdict=verdict,
        note=note or None,
        metadata={"agentId": token.agent_id, **(metadata or {})},
    )
    return {"memoryId": memory_id, "recorded": history_json(row)}


def pipeline_status(token: ApiToken) -> dict:
    """The pipeline's mode and what waits for people about this token's agent."""
    config = get_config()
    agent_id = token.agent_id
    pending = Proposal.objects.filter(agent_id=agent_id, status=ProposalStatus.PENDING)
    jobs = Job.objects.filter(memory__agent_id=agent_id)
    waiting = list(
        pending.filter(review_needed=True)
        .prefetch_related("approvals")
        .order_by("created_at", "position")[:10]
    )
    return {
        "mode": mode_of(config),
        "mutationsFrozen": config.mutations_frozen,
        "agentId": agent_id,
        "jobs": {
            status: jobs.filter(status=status).count()
            for status in (JobStatus.PENDING, JobStatus.LEASED, JobStatus.DEAD)
        },
        "pendingProposals": pending.count(),
        "contradictions": pending.filter(review_needed=True).count(),
        "contradictionsWaiting": [proposal_json(proposal) for proposal in waiting],
        "note": "Proposals are approved or rejected by people in the dashboard, never by agents.",
    }
