"""JSON API for memories (DESIGN §7): remember, get, history, patch, delete, recover, recall, health."""

from __future__ import annotations

from django.conf import settings
from django.http import JsonResponse

from api.http import BadRequest, api, json_body, optional
from api.serializers import history_json, memory_json
from memory import writes
from memory.content import is_effectively_empty, normalize
from memory.models import Memory
from memory.search import hybrid_search
from memory.writes import Actor, Refused, Triple
from pipeline.embedders import embed_or_none


def _actor(request, body: dict | None = None, default_type: str = "agent") -> Actor:
    # The token is the authenticated principal; an explicit changedBy only adds detail.
    name = request.api_token.name
    if body and isinstance(body.get("changedBy"), str) and body["changedBy"].strip():
        name = f"{body['changedBy'].strip()[:80]} via {request.api_token.name}"
    return Actor(name, default_type)


def _content(body: dict, *, required: bool) -> str | None:
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


def _tags(body: dict) -> list[str] | None:
    tags = body.get("tags")
    if tags is None:
        return None
    if not isinstance(tags, list) or not all(isinstance(tag, str) for tag in tags):
        raise BadRequest("tags must be a list of strings")
    return [tag.strip() for tag in tags if tag.strip()]


def _importance(body: dict) -> float | None:
    value = optional(body, "importance", (int, float), "a number between 0 and 1")
    if value is not None and not 0 <= value <= 1:
        raise BadRequest("importance must be a number between 0 and 1")
    return None if value is None else float(value)


def _triples(body: dict) -> list[Triple]:
    entities = body.get("entities")
    if entities is None:
        return []
    if not isinstance(entities, list):
        raise BadRequest("entities must be a list of {source, relationship, target} objects")
    triples = []
    for index, item in enumerate(entities):
        if not isinstance(item, dict):
            raise BadRequest(f"entities[{index}] must be an object")
        values = {}
        for key in ("source", "relationship", "target"):
            value = item.get(key)
            if not isinstance(value, str) or not value.strip():
                raise BadRequest(f"entities[{index}].{key} must be a non-empty string")
            values[key] = value.strip()
        for key in ("sourceType", "targetType"):
            if item.get(key) is not None and not isinstance(item[key], str):
                raise BadRequest(f"entities[{index}].{key} must be a string")
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


def _short_string(body: dict, key: str, limit: int = 200) -> str | None:
    value = optional(body, key, str, "a string")
    if value is not None and len(value) > limit:
        raise BadRequest(f"{key} must be at most {limit} characters")
    return value


def _if_version(body: dict) -> int | None:
    value = optional(body, "ifVersion", int, "a positive integer")
    if value is not None and value < 1:
        raise BadRequest("ifVersion must be a positive integer")
    return value


def _memory_or_404(memory_id: str) -> Memory:
    memory = Memory.objects.filter(id=memory_id).first()
    if memory is None:
        raise Refused("not_found", f"memory {memory_id} not found")
    return memory


@api(("POST",), "ingest")
def remember(request):
    body = json_body(request)
    content = _content(body, required=True)
    pinned = optional(body, "pinned", bool, "a boolean")
    importance = _importance(body)
    result = writes.remember(
        content,
        actor=_actor(request),
        who=_short_string(body, "who"),
        why=_short_string(body, "why") or "",
        type=_short_string(body, "type", 40) or "fact",
        agent_id=_short_string(body, "agentId") or request.api_token.agent_id,
        pinned=bool(pinned),
        importance=0.5 if importance is None else importance,
        tags=_tags(body),
        source_type=_short_string(body, "sourceType", 40) or "manual",
        source_id=_short_string(body, "sourceId"),
        triples=_triples(body),
    )
    memory = result.memory
    payload = {
        "id": memory.id,
        "contentHash": memory.content_hash,
        "deduped": result.deduped,
        "jobId": result.job.id if result.job else None,
        "linkedEntityIds": result.linked_entity_ids,
    }
    return JsonResponse(payload, status=200 if result.deduped else 201)


@api(("GET", "PATCH", "DELETE"), None)
def memory_detail(request, memory_id: str):
    if request.method == "GET":
        return JsonResponse(memory_json(_memory_or_404(memory_id)))
    from api.auth import has_scope

    if not has_scope(request.api_token, "review"):
        raise BadRequest("this token lacks the 'review' scope", 403, "forbidden")
    if request.method == "PATCH":
        return _patch(request, memory_id)
    return _delete(request, memory_id)


def _patch(request, memory_id: str):
    body = json_body(request)
    reason = optional(body, "reason", str, "a string")
    if not reason or not reason.strip():
        raise BadRequest("reason is required", code="reason_required")
    content = _content(body, required=False)
    changes = {
        "content": content,
        "type": _short_string(body, "type", 40),
        "tags": _tags(body),
        "importance": _importance(body),
        "pinned": optional(body, "pinned", bool, "a boolean"),
    }
    if all(value is None for value in changes.values()):
        raise BadRequest("nothing to change: give content, type, tags, importance or pinned")
    memory = _memory_or_404(memory_id)
    vector = None
    if content is not None and normalize(content).storage != memory.content:
        vector = embed_or_none(normalize(content).storage)
    try:
        memory = writes.modify(
            memory_id,
            changes,
            actor=_actor(request, body, "operator"),
            reason=reason.strip(),
            if_version=_if_version(body),
            vector=vector,
        )
    except Refused as refused:
        if refused.code == "no_changes":
            return JsonResponse({"id": memory_id, "status": "no_changes", **refused.details})
        raise
    return JsonResponse({"status": "updated", "memory": memory_json(memory), **memory_json(memory)})


def _flag(value) -> bool:
    return value is True or (isinstance(value, str) and value.lower() in {"1", "true", "yes"})


def _delete(request, memory_id: str):
    body = json_body(request, allow_empty=True)
    reason = body.get("reason", request.GET.get("reason"))
    if not isinstance(reason, str) or not reason.strip():
        raise BadRequest("reason is required", code="reason_required")
    force = body.get("force", request.GET.get("force", False))
    if_version = _if_version(body)
    memory = writes.forget(
        memory_id,
        actor=_actor(request, body, "operator"),
        reason=reason.strip(),
        force=_flag(force),
        if_version=if_version,
    )
    return JsonResponse({"id": memory.id, "status": "deleted", "version": memory.version})


@api(("POST",), "review")
def recover(request, memory_id: str):
    body = json_body(request, allow_empty=True)
    reason = optional(body, "reason", str, "a string") or "recovered through the API"
    memory = writes.recover(
        memory_id,
        actor=_actor(request, body, "operator"),
        reason=reason.strip(),
        if_version=_if_version(body),
    )
    return JsonResponse({"id": memory.id, "status": "recovered", "version": memory.version})


@api(("GET",), None)
def history(request, memory_id: str):
    memory = _memory_or_404(memory_id)
    rows = memory.history.order_by("created_at", "id")
    return JsonResponse({"memoryId": memory.id, "history": [history_json(row) for row in rows]})


@api(("POST",), None)
def recall(request):
    body = json_body(request)
    query = optional(body, "query", str, "a string")
    if not query or not query.strip():
        raise BadRequest("query is required")
    if len(query) > settings.MEMORY_MAX_CONTENT_CHARS:
        raise BadRequest("query is too long", 413, "too_large")
    limit = optional(body, "limit", int, "an integer between 1 and 100")
    limit = 10 if limit is None else limit
    if not 1 <= limit <= 100:
        raise BadRequest("limit must be an integer between 1 and 100")
    agent_id = _short_string(body, "agentId") or request.api_token.agent_id
    from pipeline.config import search_settings

    alpha, min_score = search_settings()
    warnings = []
    vector = embed_or_none(query)
    if vector is None:
        warnings.append("embedding server unavailable: keyword results only")
    hits = hybrid_search(
        query,
        agent_id=agent_id,
        k=limit,
        alpha=alpha,
        min_score=min_score,
        query_vector=vector.values if vector else None,
        model=vector.model if vector else None,
    )
    memories = Memory.objects.in_bulk([hit.memory_id for hit in hits])
    results = []
    for hit in hits:
        memory = memories[hit.memory_id]
        results.append(
            {
                **memory_json(memory),
                "score": round(hit.score, 4),
                "keywordScore": None if hit.keyword_score is None else round(hit.keyword_score, 4),
                "vectorScore": None if hit.vector_score is None else round(hit.vector_score, 4),
            }
        )
    return JsonResponse({"query": query, "results": results, "warnings": warnings})


@api(("GET",), None, public=True)
def health(request):
    from api.health import health_report

    report = health_report()
    return JsonResponse(report, status=200 if report["database"]["ok"] else 503)
