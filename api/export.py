"""GET /api/export: the store as JSON Lines (memory.export), streamed as it is read; admin scope.

A token bound to one agent exports that agent's memories (naming another is a 403); a
multi-agent token exports every agent's, or the one `agent` names. Query parameters:
`agent`, `includeHistory`, `includeDeleted` (true/false).
"""

from __future__ import annotations

from django.http import StreamingHttpResponse

from api.auth import only_agent
from api.http import BadRequest, api, bool_param
from api.memory_service import require_agent
from memory import export as exporting

CONTENT_TYPE = "application/x-ndjson; charset=utf-8"


@api(("GET",), "admin")
def export(request):
    token = request.api_token
    agent = request.GET.get("agent")
    if agent is not None:
        agent = agent.strip()
        if not agent or len(agent) > 200:
            raise BadRequest("agent must be an agent id of 1 to 200 characters")
        require_agent(token, agent)
    else:
        agent = only_agent(token)
    response = StreamingHttpResponse(
        exporting.lines(
            agent=agent,
            include_history=bool(bool_param(request, "includeHistory")),
            include_deleted=bool(bool_param(request, "includeDeleted")),
            every_agent=token.multi_agent,
        ),
        content_type=CONTENT_TYPE,
    )
    response["Content-Disposition"] = f'attachment; filename="{exporting.file_name(agent)}"'
    response["Cache-Control"] = "no-store"
    return response
