"""serve: gunicorn (web, static files via whitenoise) and the django-q2 cluster, stopped together."""

import os
import signal
import subprocess
import sys
import time

from django.core.management.base import BaseCommand


class Command(BaseCommand):
    help = "Serve on http://127.0.0.1:8000 with gunicorn and run the qcluster beside it; Ctrl-C stops both."

    def add_arguments(self, parser):
        parser.add_argument("--bind", default=os.environ.get("MEMORY_BIND", "127.0.0.1:8000"))
        parser.add_argument(
            "--web-workers", type=int, default=int(os.environ.get("WEB_CONCURRENCY", 2))
        )

    def handle(self, *args, bind, web_workers, **options):
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
        children = [web, cluster]
        self.stdout.write(
            f"Serving on http://{bind}/ (web pid {web.pid}, workers pid {cluster.pid}). Ctrl-C stops both."
        )

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
        self.stdout.write("Stopped web and workers.")
