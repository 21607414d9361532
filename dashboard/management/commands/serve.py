"""serve: gunicorn (web, static files via whitenoise), the django-q2 cluster and the MCP server.

The MCP server (streamable HTTP, for agents) is its own ASGI process on the next port: the web
workers are synchronous, and MCP sessions live in the memory of one process.
"""

import os
import signal
import subprocess
import sys
import time

from django.core.management.base import BaseCommand

DEFAULT_BIND = "127.0.0.1:8000"


def bind_address() -> str:
    """Where the dashboard listens: MEMORY_BIND (host:port), else 127.0.0.1:8000."""
    return os.environ.get("MEMORY_BIND") or DEFAULT_BIND


def public_url(bind: str) -> str:
    """The address to open for a bind: a wildcard host means "this machine's address"."""
    host, _, port = bind.rpartition(":")
    if host in {"", "0.0.0.0", "::", "[::]"}:
        return f"http://<this machine's address>:{port}/"
    return f"http://{bind}/"


class Command(BaseCommand):
    help = (
        "Serve on MEMORY_BIND (default http://127.0.0.1:8000) with gunicorn, run the qcluster "
        "and the MCP server (the next port, /mcp) beside it; Ctrl-C stops all three."
    )

    def add_arguments(self, parser):
        parser.add_argument("--bind", default=bind_address())
        parser.add_argument(
            "--web-workers", type=int, default=int(os.environ.get("WEB_CONCURRENCY", 2))
        )
        parser.add_argument(
            "--mcp-bind",
            default=os.environ.get("MEMORY_MCP_BIND"),
            help="host:port of the MCP server (default: the web host, next port)",
        )

    def handle(self, *args, bind, web_workers, mcp_bind, **options):
        from django.core.management import call_command

        call_command("setup_schedules")
        bin_dir = os.path.dirname(sys.executable)
        # Own sessions: Ctrl-C reaches only this process, which then stops each child by its
        # main pid (a SIGTERM to a whole django-q2 process group made shutdown hang).
        web = subprocess.Popen(
            [
                os.path.join(bin_dir, "gunicorn"),
                "config.wsgi",
                "--bind",
                bind,
                "--workers",
                str(web_workers),
                "--access-logfile",
                "-",
                "--graceful-timeout",
                "5",
            ],
            start_new_session=True,
        )
        cluster = subprocess.Popen(
            [sys.executable, "manage.py", "qcluster"], start_new_session=True
        )
        mcp_bind = mcp_bind or _next_port(bind)
        mcp = subprocess.Popen(
            [sys.executable, "manage.py", "mcp", "--http", "--bind", mcp_bind],
            start_new_session=True,
        )
        children = [web, cluster, mcp]
        self.stdout.write(
            f"Serving on http://{bind}/ (web pid {web.pid}, workers pid {cluster.pid}).\n"
            f"MCP for agents (streamable HTTP): http://{mcp_bind}/mcp with the header "
            f"'Authorization: Bearer <token>' (pid {mcp.pid}). Ctrl-C stops all three.",
        )
        self.stdout.flush()

        def stop(*_):
            for child in children:
                if child.poll() is None:
                    child.send_signal(signal.SIGTERM)

        signal.signal(signal.SIGINT, stop)
        signal.signal(signal.SIGTERM, stop)
        try:
            while all(child.poll() is None for child in children):
                time.sleep(0.5)
        finally:
            stop()
            deadline = time.monotonic() + 15
            for child in children:
                try:
                    child.wait(timeout=max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    child.kill()
        self.stdout.write("Stopped web, workers and MCP.")


def _next_port(bind: str) -> str:
    host, _, port = bind.rpartition(":")
    return f"{host}:{int(port) + 1}"
