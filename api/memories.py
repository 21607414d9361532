"""JSON API for memories (DESIGN §7): remember, get, history, patch, delete, recover, recall, health.

The views only read the request; validation, the store calls and the JSON shapes live in
api.memory_service, which the MCP tools call too.
"""

from __future__ import annotations

from django.http import JsonResponse

from api import memory_service
from api.http import api, json_body


@api(("POST",), "ingest")
def remember(request):
    payload, deduped = memory_service.remember(request.api_token, json_body(request))
    return JsonResponse(payload, status=200 if deduped else 201)


@api(("GET", "PATCH", "DELETE"), None)
def memory_detail(request, memory_id: str):
    if request.method == "GET":
        return JsonResponse(memory_service.get_memory(request.api_token, memory_id))
    # The scope is checked before the body is read, as the decorator does for other views.
    memory_service.require_scope(request.api_token, "review")
    if request.method == "PATCH":
        body = {**_from_query(request, ("reason", "ifVersion")), **json_body(request)}
        return JsonResponse(memory_service.modify(request.api_token, memory_id, body))
    body = json_body(request, allow_empty=True)
    query = _from_query(request, ("reason", "force", "ifVersion"))
    return JsonResponse(memory_service.forget(request.api_token, memory_id, {**query, **body}))


@api(("POST",), "review")
def recover(request, memory_id: str):
    body = json_body(request, allow_empty=True)
    query = _from_query(request, ("reason", "ifVersion"))
    return JsonResponse(memory_service.recover(request.api_token, memory_id, {**query, **body}))


def _from_query(request, keys: tuple[str, ...]) -> dict:
    """A write's `keys` given as query parameters, read as the body's fields (the body wins when
    it has them). Every write reads them alike: an ifVersion in the query was ignored by PATCH
    and recover, so a stale edit went through, as a stale delete once did."""
    query = {key: request.GET[key] for key in keys if key in request.GET}
    if "force" in query:  # a query parameter is text: true, 1 or yes
        query["force"] = memory_service.flag(query["force"])
    if "ifVersion" in query:  # text too: a whole number, or the field's own error
        text = query["ifVersion"].strip()
        query["ifVersion"] = int(text) if text.isascii() and text.isdigit() else text
    return query


@api(("GET",), None)
def history(request, memory_id: str):
    return JsonResponse(memory_service.history(request.api_token, memory_id))


@api(("POST",), None)
def recall(request):
    return JsonResponse(memory_service.recall(request.api_token, json_body(request)))
