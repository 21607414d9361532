"""The MCP server (official `mcp` SDK): memory tools and `memory://<id>` resources for agents.

Every tool calls api.memory_service, the functions behind the JSON API, so scopes, validation
messages and JSON shapes are the API's, and bad input writes nothing. The caller is always an API
token: MEMORY_MCP_TOKEN on stdio, each request's `Authorization: Bearer` header over HTTP. No tool
approves or rejects proposals: that stays with people in the dashboard.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import anyio
from django.db import close_old_connections
from mcp import types
from mcp.server import Server, ServerRequestContext
from mcp.shared.exceptions import MCPError

from api import memory_service
from api.auth import authenticate, refusal
from api.http import MAX_INT, STORAGE_FULL_MESSAGE, BadRequest, check_strings
from memory.backend import storage_full
from memory.models import ApiToken
from memory.writes import Refused

log = logging.getLogger(__name__)

SERVER_NAME = "memory-curation"
SOURCE_TYPE = "mcp"
RESOURCE_PREFIX = "memory://"
RESOURCE_LIST_SIZE = 50
UNAUTHORIZED = (
    "a valid API token is required: set MEMORY_MCP_TOKEN for stdio, or send "
    "'Authorization: Bearer <token>' over HTTP (create one with manage.py create_api_token)"
)

INSTRUCTIONS = """\
A shared long-term memory curated by people. Use `recall` before answering questions about the
user, their projects or past decisions; use `remember` for durable facts, preferences and
decisions worth keeping (one fact per call, in plain words). After using recalled memories, send
`feedback` for each: `used`, `ignored` (not relevant) or `contradicted` (what you saw says
otherwise, explained in the note), so reviewers can fix what misleads you. New memories are
processed by a pipeline whose changes people review; `pipeline_status` shows what is waiting.
"""


@dataclass(frozen=True)
class Call:
    token: ApiToken
    args: dict[str, Any]
    client: str | None


@dataclass(frozen=True)
class ToolSpec:
    name: str
    title: str
    description: str
    properties: dict[str, dict]
    required: tuple[str, ...]
    run: Callable[[Call], dict]
    read_only: bool = False
    destructive: bool = False

    def tool(self) -> types.Tool:
        return types.Tool(
            name=self.name,
            title=self.title,
            description=self.description,
            input_schema={
                "type": "object",
                "properties": self.properties,
                "required": list(self.required),
                "additionalProperties": False,
            },
            annotations=types.ToolAnnotations(
                title=self.title,
                read_only_hint=self.read_only,
                destructive_hint=self.destructive,
                idempotent_hint=self.read_only,
                open_world_hint=False,
            ),
        )


# --- argument schemas (the model reads these descriptions) ----------------------------------------

ID = {"type": "string", "description": "The memory's id, as remember, recall or list returned it."}
TAGS = {
    "type": "array",
    "items": {"type": "string"},
    "maxItems": memory_service.MAX_TAGS,
    "description": 'Short labels, e.g. ["git", "billing-api"] '
    f"(at most {memory_service.MAX_TAGS}, each up to {memory_service.TAG_CHARS} characters).",
}
# `project` is kept as the tag "project:<name>", within a tag's length.
PROJECT_TAG = "project:"
PROJECT_CHARS = memory_service.TAG_CHARS - len(PROJECT_TAG)
PROJECT = {
    "type": "string",
    "maxLength": PROJECT_CHARS,
    "description": "Project the memory belongs to; stored as the tag 'project:<name>'.",
}
TYPE = {
    "type": "string",
    "description": "Kind of memory: fact, preference, decision, procedural or semantic.",
}
IF_VERSION = {
    "type": "integer",
    "minimum": 1,
    "description": "Only change the memory if it is still at this version (from get_memory); "
    "otherwise the call fails with version_conflict and nothing changes.",
}
REASON = {"type": "string", "description": "Why, in a sentence; kept in the audit trail."}
EXPIRES_AT = {
    "type": "string",
    "description": "When the memory stops being true, as ISO 8601 with a time zone, e.g. "
    "2027-01-31T00:00:00Z. From then on recall no longer finds it; it is purged later.",
}
FILTERS = {
    "type": {"type": "string", "description": "Only memories of this type."},
    "tags": {**TAGS, "description": "Only memories carrying all of these tags."},
    "project": {
        "type": "string",
        "maxLength": PROJECT_CHARS,
        "description": "Only memories of this project.",
    },
}


# --- tools ------------------------------------------------------------------------------------------


def _memory_id(args: dict) -> str:
    value = args.get("id")
    if not isinstance(value, str) or not value.strip():
        raise BadRequest("id is required: the memory's id, as remember or recall returned it")
    return value.strip()


def _with_project(args: dict) -> dict:
    """The MCP-only `project` argument becomes a tag, so the store and the API see a tag."""
    body = dict(args)
    project = body.pop("project", None)
    if project is None:
        return body
    if not isinstance(project, str) or not project.strip():
        raise BadRequest("project must be a non-empty string")
    if len(project) > PROJECT_CHARS:  # as the schema's maxLength counts it
        raise BadRequest(
            f"project must be at most {PROJECT_CHARS} characters (it is kept as the tag "
            f"'{PROJECT_TAG}<project>', and a tag holds at most {memory_service.TAG_CHARS})"
        )
    # The tags as the API checks them first: a tag that is not a string is that field's error.
    tags = memory_service.tags_field(body) or []
    tag = f"{PROJECT_TAG}{project.strip()}"
    if len(tags) >= memory_service.MAX_TAGS and tag not in tags:
        raise BadRequest(
            f"tags may hold at most {memory_service.MAX_TAGS - 1} items with a project: the "
            f"project is kept as one more tag ({tag!r})"
        )
    body["tags"] = list(dict.fromkeys([*tags, tag]))
    return body


def _remember(call: Call) -> dict:
    body = {**_with_project(call.args), "sourceType": SOURCE_TYPE, "sourceId": call.client}
    payload, _ = memory_service.remember(call.token, body)
    return payload


def _recall(call: Call) -> dict:
    body = _with_project(call.args)
    filters = None
    if body.get("type") is not None or body.get("tags") is not None:
        filters = memory_service.filters_field({"type": body.get("type"), "tags": body.get("tags")})
    return memory_service.recall(call.token, body, filters)


def _list(call: Call) -> dict:
    return memory_service.list_memories(call.token, _with_project(call.args))


def _modify(call: Call) -> dict:
    memory_id = _memory_id(call.args)
    body = {key: value for key, value in call.args.items() if key != "id"}
    return memory_service.modify(call.token, memory_id, body)


def _forget(call: Call) -> dict:
    memory_id = _memory_id(call.args)
    body = {key: value for key, value in call.args.items() if key != "id"}
    return memory_service.forget(call.token, memory_id, body)


def _feedback(call: Call) -> dict:
    memory_id = _memory_id(call.args)
    return memory_service.feedback(
        call.token, memory_id, call.args, metadata={"via": SOURCE_TYPE, "client": call.client}
    )


TOOLS = {
    spec.name: spec
    for spec in (
        ToolSpec(
            name="remember",
            title="Remember",
            description=(
                "Store one durable memory: a fact, preference or decision worth knowing in a later "
                "conversation. Write one self-contained statement in plain words (who, what, "
                "which project). The text is stored as given at once; a review pipeline later "
                "extracts clean facts from it. An exact duplicate of a live memory is not stored "
                "twice: the answer then has deduped=true and the existing id. Returns "
                "{id, contentHash, deduped, jobId}. Needs the 'ingest' scope."
            ),
            properties={
                "content": {"type": "string", "description": "The memory, in plain words."},
                "who": {
                    "type": "string",
                    "description": "Who or what it came from (default: this agent's token name).",
                },
                "why": {"type": "string", "description": "Why it is worth keeping, briefly."},
                "type": TYPE,
                "tags": TAGS,
                "importance": {
                    "type": "number",
                    "minimum": 0,
                    "maximum": 1,
                    "description": "0 to 1 (default 0.5).",
                },
                "pinned": {
                    "type": "boolean",
                    "description": "Pinned memories are never changed automatically.",
                },
                "assertedBy": {
                    "type": "string",
                    "enum": ["agent", "person"],
                    "description": (
                        "Who asserts it (default agent). 'person' only when the user explicitly "
                        "said so; needs the 'assert' scope."
                    ),
                },
                "expiresAt": {
                    **EXPIRES_AT,
                    "description": EXPIRES_AT["description"]
                    + " Omit it if the memory does not expire; a moment already past is refused.",
                },
                "project": PROJECT,
            },
            required=("content",),
            run=_remember,
        ),
        ToolSpec(
            name="recall",
            title="Recall",
            description=(
                "Search this agent's live memories by meaning and keywords; best first, each with "
                "a score from 0 to 1 (keywordScore and vectorScore show the two legs). Ask a short "
                "question or give key words. Optional filters narrow the results. After using the "
                "results, report with `feedback` which ones helped or were wrong."
            ),
            properties={
                "query": {"type": "string", "description": "What to look for."},
                "limit": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": 100,
                    "description": "At most this many results (default 10).",
                },
                **FILTERS,
            },
            required=("query",),
            run=_recall,
            read_only=True,
        ),
        ToolSpec(
            name="get_memory",
            title="Get a memory",
            description=(
                "Read one memory by id: content, type, who, tags, version, whether it is deleted "
                "and whether the pipeline has processed it."
            ),
            properties={"id": ID},
            required=("id",),
            run=lambda call: memory_service.get_memory(call.token, _memory_id(call.args)),
            read_only=True,
        ),
        ToolSpec(
            name="memory_history",
            title="Memory history",
            description=(
                "The audit trail of one memory, oldest first: created, updated, deleted, "
                "recovered, reviewed and feedback events, each with who did it and why."
            ),
            properties={"id": ID},
            required=("id",),
            run=lambda call: memory_service.history(call.token, _memory_id(call.args)),
            read_only=True,
        ),
        ToolSpec(
            name="list_memories",
            title="List memories",
            description=(
                "Browse this agent's memories, newest first, a page at a time. Use recall to "
                "search; use this to page through everything or filter by type, tags, project, "
                "who or pinned. Pass nextOffset back as offset for the next page (null: no more)."
            ),
            properties={
                **FILTERS,
                "who": {
                    "type": "string",
                    "description": "Only memories whose 'who' contains this text.",
                },
                "pinned": {
                    "type": "boolean",
                    "description": "Only pinned (true) or unpinned (false) memories.",
                },
                "includeDeleted": {
                    "type": "boolean",
                    "description": "Include forgotten memories (default false).",
                },
                "includeExpired": {
                    "type": "boolean",
                    "description": "Include memories past their expiresAt (default false).",
                },
                "limit": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": memory_service.LIST_MAX,
                    "description": "Page size (default 20).",
                },
                "offset": {
                    "type": "integer",
                    "minimum": 0,
                    "description": "How many to skip (default 0).",
                },
            },
            required=(),
            run=_list,
            read_only=True,
        ),
        ToolSpec(
            name="modify",
            title="Modify a memory",
            description=(
                "Correct a memory: new content and/or type, tags, importance, pinned, expiresAt. "
                "A reason is required and kept in the audit trail; the old text is archived and "
                "the version goes up by one. Pass ifVersion to fail instead of overwriting a "
                "newer change. "
                "Needs the 'review' scope; to report a wrong memory without that scope, use "
                "feedback with verdict 'contradicted'."
            ),
            properties={
                "id": ID,
                "reason": REASON,
                "content": {"type": "string", "description": "The corrected text."},
                "type": TYPE,
                "tags": {**TAGS, "description": "Replaces the memory's tags."},
                "importance": {"type": "number", "minimum": 0, "maximum": 1},
                "pinned": {"type": "boolean"},
                "expiresAt": {
                    **EXPIRES_AT,
                    "type": ["string", "null"],
                    "description": EXPIRES_AT["description"]
                    + " null lifts the expiry; a moment already past expires the memory now.",
                },
                "ifVersion": IF_VERSION,
            },
            required=("id", "reason"),
            run=_modify,
            destructive=True,
        ),
        ToolSpec(
            name="forget",
            title="Forget a memory",
            description=(
                "Soft-delete a memory that is wrong or obsolete (people can recover it for 30 "
                "days). A reason is required; a pinned memory also needs force=true. Pass "
                "ifVersion to fail if it changed since you read it. Needs the 'review' scope."
            ),
            properties={
                "id": ID,
                "reason": REASON,
                "force": {"type": "boolean", "description": "Required to forget a pinned memory."},
                "ifVersion": IF_VERSION,
            },
            required=("id", "reason"),
            run=_forget,
            destructive=True,
        ),
        ToolSpec(
            name="feedback",
            title="Feedback on a memory",
            description=(
                "Report what a recalled memory was worth in this conversation: 'used' (it "
                "helped), 'ignored' (not relevant) or 'contradicted' (what you saw says otherwise; "
                "say what in the note). Reviewers see these reports and fix the memories that "
                "mislead agents. Recorded in the memory's audit trail; the memory is not changed. "
                "Needs the 'ingest' scope."
            ),
            properties={
                "id": ID,
                "verdict": {"type": "string", "enum": ["used", "ignored", "contradicted"]},
                "note": {
                    "type": "string",
                    "description": "What you saw; required for 'contradicted'.",
                    "maxLength": memory_service.FEEDBACK_NOTE_CHARS,
                },
            },
            required=("id", "verdict"),
            run=_feedback,
        ),
        ToolSpec(
            name="pipeline_status",
            title="Pipeline status",
            description=(
                "The curation pipeline's mode (disabled, shadow, controlled-write or full), this "
                "agent's jobs waiting or failed, and its proposals waiting for a person, with the "
                "contradictions among them. Approving and rejecting happen in the dashboard."
            ),
            properties={},
            required=(),
            run=lambda call: memory_service.pipeline_status(call.token),
            read_only=True,
        ),
    )
}


# --- running a tool: in a worker thread, because the Django ORM is synchronous -------------------


def _error(code: str, message: str, **details: Any) -> dict:
    return {"error": code, "message": message, **details}


def _in_thread(fn: Callable, *args):
    """Run fn as one unit of work, with the connection handling Django does around a request."""
    close_old_connections()
    try:
        return fn(*args)
    finally:
        close_old_connections()


def check_integers(value: Any, where: str) -> None:
    """Every integer in the arguments, however deep, within +-MAX_INT: the bound the JSON API's
    parser puts on a body (api.http), which the SDK's JSON parsing does not, so a huge offset or
    version is refused here before it can overflow a query."""
    if isinstance(value, bool):
        return
    if isinstance(value, int):
        if abs(value) > MAX_INT:
            raise BadRequest(f"{where}: integers must be between -{MAX_INT} and {MAX_INT}")
    elif isinstance(value, dict):
        for key, item in value.items():
            check_integers(item, f"{where}.{key}")
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            check_integers(item, f"{where}[{index}]")


def run_tool(name: str, arguments: dict | None, authorization: str | None, client: str | None):
    """(payload, is_error) of one tool call; errors are the JSON API's {error, message}."""
    spec = TOOLS.get(name)
    if spec is None:
        return _error("unknown_tool", f"no tool named {name!r}; see tools/list"), True
    token = authenticate(authorization)
    if token is None:
        return _error(*refusal(authorization, UNAUTHORIZED)), True
    args = arguments or {}
    try:
        check_strings(args, "arguments")
        check_integers(args, "arguments")
        unknown = sorted(set(args) - set(spec.properties))
        if unknown:
            takes = ", ".join(spec.properties) or "no arguments"
            raise BadRequest(f"unknown argument(s): {', '.join(unknown)}; {name} takes {takes}")
        return spec.run(Call(token, args, client)), False
    except BadRequest as exc:
        return _error(exc.code, exc.message), True
    except Refused as refused:
        return _error(refused.code, refused.message, **refused.details), True
    except Exception as exc:
        if storage_full(exc):  # the JSON API's 507: the write failed whole, nothing is stored
            return _error("storage_full", STORAGE_FULL_MESSAGE), True
        log.exception("MCP tool %s failed", name)
        return _error(
            "internal_error", "the tool failed on the server; the server log has why"
        ), True


def read_memory_resource(uri: str, authorization: str | None) -> str:
    """memory://<id> as JSON: the memory and its audit trail (of an agent the token may read)."""
    token = authenticate(authorization)
    if token is None:
        raise MCPError(types.INVALID_REQUEST, refusal(authorization, UNAUTHORIZED)[1])
    memory_id = uri[len(RESOURCE_PREFIX) :] if uri.startswith(RESOURCE_PREFIX) else ""
    try:
        memory = memory_service.get_memory(token, memory_id)
        trail = memory_service.history(token, memory_id)["history"]
    except Refused as refused:
        raise MCPError(types.INVALID_PARAMS, refused.message, {"uri": uri}) from refused
    except BadRequest as exc:
        raise MCPError(types.INVALID_REQUEST, exc.message, {"uri": uri}) from exc
    return json.dumps({"memory": memory, "history": trail}, ensure_ascii=False)


def list_memory_resources(authorization: str | None) -> list[types.Resource]:
    token = authenticate(authorization)
    if token is None:
        raise MCPError(types.INVALID_REQUEST, refusal(authorization, UNAUTHORIZED)[1])
    newest = memory_service.list_memories(token, {"limit": RESOURCE_LIST_SIZE})["memories"]
    return [
        types.Resource(
            uri=f"{RESOURCE_PREFIX}{memory['id']}",
            name=memory["id"],
            title=memory["content"][:80],
            mime_type="application/json",
        )
        for memory in newest
    ]


# --- the SDK server -------------------------------------------------------------------------------

Authorization = Callable[[ServerRequestContext], str | None]


def _client_name(ctx: ServerRequestContext) -> str | None:
    params = ctx.session.client_params
    return params.client_info.name[:200] if params and params.client_info else None


def build_server(authorization: Authorization) -> Server:
    """The low-level SDK server: explicit JSON schemas, raw arguments for the shared validation."""

    async def list_tools(ctx, params) -> types.ListToolsResult:
        return types.ListToolsResult(tools=[spec.tool() for spec in TOOLS.values()])

    async def call_tool(ctx, params: types.CallToolRequestParams) -> types.CallToolResult:
        payload, is_error = await anyio.to_thread.run_sync(
            _in_thread,
            run_tool,
            params.name,
            params.arguments,
            authorization(ctx),
            _client_name(ctx),
        )
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=json.dumps(payload, ensure_ascii=False))],
            structured_content=payload,
            is_error=is_error,
        )

    async def list_resources(ctx, params) -> types.ListResourcesResult:
        resources = await anyio.to_thread.run_sync(
            _in_thread, list_memory_resources, authorization(ctx)
        )
        return types.ListResourcesResult(resources=resources)

    async def list_resource_templates(ctx, params) -> types.ListResourceTemplatesResult:
        template = types.ResourceTemplate(
            uri_template=RESOURCE_PREFIX + "{id}",
            name="memory",
            title="A memory with its audit trail",
            mime_type="application/json",
        )
        return types.ListResourceTemplatesResult(resource_templates=[template])

    async def read_resource(ctx, params: types.ReadResourceRequestParams):
        uri = str(params.uri)
        text = await anyio.to_thread.run_sync(
            _in_thread, read_memory_resource, uri, authorization(ctx)
        )
        contents = types.TextResourceContents(uri=uri, text=text, mime_type="application/json")
        return types.ReadResourceResult(contents=[contents])

    return Server(
        SERVER_NAME,
        version="1.0",
        title="Memory curation dashboard",
        instructions=INSTRUCTIONS,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        on_list_resources=list_resources,
        on_list_resource_templates=list_resource_templates,
        on_read_resource=read_resource,
    )
