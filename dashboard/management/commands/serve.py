"""serve: gunicorn (web, static files via whitenoise), the django-q2 cluster and the MCP server,
supervised (dashboard.supervisor): one that dies is restarted, and only Ctrl-C stops them.

The MCP server (streamable HTTP, for agents) is its own ASGI process on the next port: the web
workers are WSGI (threads in a few processes), and MCP sessions live in the memory of one process.
"""

import os
import sys
import time

from django.conf import settings
from django.core.management.base import BaseCommand

from dashboard.supervisor import Child, Supervisor
from memory import queue_beat

DEFAULT_BIND = "127.0.0.1:8000"
# gunicorn's default access log line has the request line (%(r)s, with its query string) and the
# Referer (%(f)s, with its own): search terms (?q=) and delete reasons would reach the log. This
# one logs the path alone (%(U)s), with the time taken in ms.
ACCESS_LOG_FORMAT = '%(h)s %(t)s "%(m)s %(U)s %(H)s" %(s)s %(b)s %(M)sms "%(a)s"'


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
        "and the MCP server (the next port, /mcp) beside it, restarting any that stops; "
        "Ctrl-C stops all three."
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
        mcp_bind = mcp_bind or _next_port(bind)
        web = Child(
            "web",
            [
                os.path.join(bin_dir, "gunicorn"),
                "config.wsgi",
                "--bind",
                bind,
                "--workers",
                str(web_workers),
                # Threads, not one request per process: a recall waiting on a hung embedding
                # server holds one thread (and at most MEMORY_RECALL_EMBED_PARALLEL of them),
                # so remember and health keep being answered by the others.
                "--worker-class",
                "gthread",
                "--threads",
                str(max(1, int(os.environ.get("WEB_THREADS", 4)))),
                "--access-logfile",
                "-",
                "--access-logformat",
                ACCESS_LOG_FORMAT,
                "--graceful-timeout",
                "5",
            ],
        )
        # The project folder, whatever folder serve was started from (config.wsgi, manage.py).
        project = str(settings.BASE_DIR)
        manage = os.path.join(project, "manage.py")
        web.cwd = project
        cluster = Child(
            "workers",
            [sys.executable, manage, "qcluster"],
            cwd=project,
            watch=queue_stalled,
            before_start=queue_beat.forget_busy,  # no worker of a cluster yet to start is busy
        )
        mcp = Child(
            "mcp", [sys.executable, manage, "mcp", "--http", "--bind", mcp_bind], cwd=project
        )

        def ready():
            self.stdout.write(
                f"Serving on http://{bind}/ (web pid {web.pid}, workers pid {cluster.pid}).\n"
                f"MCP for agents (streamable HTTP): http://{mcp_bind}/mcp with the header "
                f"'Authorization: Bearer <token>' (pid {mcp.pid}). A part that stops is started "
                "again; Ctrl-C stops all three.",
            )
            self.stdout.flush()

        def say(line: str) -> None:
            self.stderr.write(line)
            self.stderr.flush()

        Supervisor([web, cluster, mcp], say).run(ready=ready)
        self.stdout.write("Stopped web, workers and MCP.")


def _next_port(bind: str) -> str:
    host, _, port = bind.rpartition(":")
    return f"{host}:{int(port) + 1}"


def queue_stalled(started_at: float) -> str | None:
    """Why the queue cluster must be restarted though it runs: it ran no task for longer than
    memory.queue_beat.stall_seconds() while tasks wait in its broker."""
    quiet = queue_beat.stalled(started_at, time.time())
    if quiet is not None:
        return f"started no task for {quiet:.0f} s while tasks wait (a tick is due every minute)"
    return None
