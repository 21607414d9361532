"""mcp: serve the MCP tools over stdio (token from MEMORY_MCP_TOKEN) or, with --http, streamable HTTP."""

import logging
import os
import sys

import anyio
import uvicorn
from django.core.management.base import BaseCommand, CommandError
from django.db import connections

from api.auth import authenticate, refusal
from api.mcp_transports import http_app, serve_stdio

DEFAULT_BIND = "127.0.0.1:8001"


def default_bind() -> str:
    return os.environ.get("MEMORY_MCP_BIND", DEFAULT_BIND)


class Command(BaseCommand):
    help = (
        "Serve the memory tools over the Model Context Protocol. Default: stdio for one local "
        "agent, as the holder of the API token in MEMORY_MCP_TOKEN. --http: streamable HTTP at "
        "http://BIND/mcp, each request authorised by its own 'Authorization: Bearer' token."
    )
    # An agent starts a stdio server per session: skip the checks every other command runs.
    requires_system_checks = []

    def add_arguments(self, parser):
        parser.add_argument("--http", action="store_true", help="serve streamable HTTP instead")
        parser.add_argument("--bind", default=default_bind(), help="host:port for --http")
        parser.add_argument("--path", default="/mcp", help="URL path of the endpoint for --http")

    def handle(self, *args, http, bind, path, **options):
        if http:
            self._serve_http(bind, path)
        else:
            self._serve_stdio()

    def _serve_stdio(self):
        token = os.environ.get("MEMORY_MCP_TOKEN", "").strip()
        if not token:
            raise CommandError(
                "MEMORY_MCP_TOKEN is not set: create a token with "
                "`manage.py create_api_token NAME --agent ID` and pass it in the environment"
            )
        if authenticate(f"Bearer {token}") is None:
            why = refusal(f"Bearer {token}", "it is not a valid, unrevoked API token")[1]
            raise CommandError(f"MEMORY_MCP_TOKEN: {why}")
        # Tool calls run in worker threads with their own connections.
        connections.close_all()
        anyio.run(serve_stdio, token)

    def _serve_http(self, bind: str, path: str):
        host, _, port = bind.rpartition(":")
        if not host or not port.isdigit():
            raise CommandError(f"--bind must be host:port, not {bind!r}")
        connections.close_all()
        level = os.environ.get("MEMORY_MCP_LOG_LEVEL", "warning").lower()
        # The SDK logs every session at INFO; beside the web access log that is noise.
        logging.getLogger("mcp").setLevel(level.upper())
        sys.stderr.write(f"MCP (streamable HTTP) on http://{bind}{path}\n")
        uvicorn.run(
            http_app(host=host, path=path),
            host=host,
            port=int(port),
            log_level=level,
            # The SDK's session manager holds sessions in memory: one process serves them all.
            workers=1,
        )
