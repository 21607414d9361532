"""How agents reach the MCP server: stdio for one local agent (its token from the environment) and
streamable HTTP beside the dashboard, where every request carries its own bearer token, the Host and
Origin headers are checked (DNS-rebinding protection) and the sessions one token or all tokens can
hold open are bounded."""

from __future__ import annotations

from collections.abc import Callable

import anyio
from django.conf import settings
from mcp.server import ServerRequestContext
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.stdio import stdio_server
from mcp.server.transport_security import TransportSecuritySettings
from starlette.responses import JSONResponse

from api.auth import authenticate, refusal
from api.mcp_server import UNAUTHORIZED, _error, _in_thread, build_server


async def serve_stdio(token: str) -> None:
    """Serve one client over stdin/stdout as the holder of `token`."""
    server = build_server(lambda ctx: f"Bearer {token}")
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


def _http_authorization(ctx: ServerRequestContext) -> str | None:
    # Each HTTP request carries its own header: a session never outlives its caller's token.
    request = ctx.request
    return request.headers.get("authorization") if request is not None else None


def _transport_security(host: str) -> TransportSecuritySettings | None:
    """DNS-rebinding protection: the Host and Origin headers must name one of MCP's own allowed
    hosts (MEMORY_MCP_ALLOWED_HOSTS; by default the bind host, loopback and Django's hosts). A
    wildcard in DJANGO_ALLOWED_HOSTS never turns it off: only `*` in MCP's own setting does."""
    configured = list(settings.MEMORY_MCP_ALLOWED_HOSTS)
    if "*" in configured:
        return TransportSecuritySettings(enable_dns_rebinding_protection=False)
    named = [h for h in (*configured, *settings.ALLOWED_HOSTS) if h != "*" and "*" not in h]
    hosts = sorted({host, "127.0.0.1", "localhost", *named})
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=[*hosts, *(f"{h}:*" for h in hosts)],
        allowed_origins=[
            f"{scheme}://{h}{port}"
            for h in hosts
            for scheme in ("http", "https")
            for port in ("", ":*")
        ],
    )


class BearerTokenRequired:
    """ASGI guard in front of the MCP endpoint: no valid token, a 401 JSON error like the API's.

    It names the token as the request's principal, so the SDK binds each session to the token
    that opened it (another token using or deleting it gets 404), and it caps the sessions one
    token may hold open (MEMORY_MCP_SESSIONS_PER_TOKEN): one agent cannot take every session of
    the server (MEMORY_MCP_MAX_SESSIONS in all; idle ones end after MEMORY_MCP_SESSION_IDLE_SECONDS).
    """

    def __init__(self, app, sessions: Callable[[], dict] | None = None):
        self.app = app
        self.sessions = sessions or dict  # session id -> owner, as the SDK's manager keeps them
        self.opening: dict[str, int] = {}  # new-session requests in flight, per principal

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        header = headers.get(b"authorization", b"").decode("latin-1")
        token = await anyio.to_thread.run_sync(_in_thread, authenticate, header or None)
        if token is None:
            why = await anyio.to_thread.run_sync(_in_thread, refusal, header or None, UNAUTHORIZED)
            response = JSONResponse(
                _error(*why),
                status_code=401,
                headers={"WWW-Authenticate": 'Bearer realm="memory-curation"'},
            )
            await response(scope, receive, send)
            return
        principal = f"api-token-{token.pk}"
        scope["user"] = AuthenticatedUser(
            AccessToken(token=principal, client_id=principal, scopes=list(token.scopes or []))
        )
        opens = scope.get("method") == "POST" and b"mcp-session-id" not in headers
        if not opens:
            await self.app(scope, receive, send)
            return
        held = sum(1 for owner in self.sessions().values() if owner["client_id"] == principal)
        if held + self.opening.get(principal, 0) >= settings.MEMORY_MCP_SESSIONS_PER_TOKEN:
            response = JSONResponse(
                _error(
                    "too_many_sessions",
                    f"this token already holds {held} open MCP sessions (at most "
                    f"{settings.MEMORY_MCP_SESSIONS_PER_TOKEN}): reuse one, or end one with "
                    "DELETE; idle sessions end by themselves",
                ),
                status_code=429,
            )
            await response(scope, receive, send)
            return
        self.opening[principal] = self.opening.get(principal, 0) + 1
        try:
            await self.app(scope, receive, send)
        finally:
            self.opening[principal] -= 1
            if not self.opening[principal]:
                del self.opening[principal]


def http_app(*, host: str = "127.0.0.1", path: str = "/mcp"):
    """The streamable HTTP ASGI app (run it under uvicorn; sessions live in this one process)."""
    server = build_server(_http_authorization)
    app = server.streamable_http_app(
        streamable_http_path=path,
        host=host,
        transport_security=_transport_security(host),
        max_sessions=settings.MEMORY_MCP_MAX_SESSIONS,
        session_idle_timeout=settings.MEMORY_MCP_SESSION_IDLE_SECONDS,
    )
    manager = server._session_manager  # pinned SDK (mcp==2.3.0): who owns each open session
    return BearerTokenRequired(app, sessions=lambda: manager._session_owners)
