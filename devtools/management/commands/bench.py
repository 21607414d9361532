"""bench [--engine sqlite|postgres] [--sizes 10k,100k] [--json FILE]: measure the store and
the pipeline at scale. bench --scale [--sizes 10k,100k,1M]: how search, recall, a job's overhead
and memory grow with the store (devtools/bench_scale.py), about ten minutes at its default sizes.

The command never touches your database: it re-runs itself in a child process whose database and
MEMORY_DATA_DIR are temporary (a SQLite file in a temporary directory; with --engine postgres a
new database `memory_bench_*` on the DATABASE_URL server, or on an embedded PostgreSQL started for
the run when DATABASE_URL is unset), builds its own data there (fixed seed), measures, writes the
JSON and removes it all. See devtools/bench.py.
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

BENCH_DIR_ENV = "MEMORY_BENCH_DIR"
BENCH_DB_ENV = "MEMORY_BENCH_DATABASE"


def _raise_exit(signum, frame):
    raise SystemExit(128 + signum)


_UNITS = {"k": 1_000, "m": 1_000_000}


def _size(part: str) -> int:
    part = part.strip().replace("_", "").lower()
    if part[-1:] in _UNITS:
        return int(float(part[:-1]) * _UNITS[part[-1]])
    return int(part)


def parse_sizes(value: str) -> list[int]:
    try:
        sizes = [_size(part) for part in value.split(",") if part.strip()]
    except ValueError as exc:
        raise argparse.ArgumentTypeError(
            "sizes must be comma-separated counts (10000, 10k, 1M)"
        ) from exc
    if not sizes or any(size < 50 for size in sizes):
        raise argparse.ArgumentTypeError("give one or more sizes of at least 50")
    return sizes


def at_least_one(value: str) -> int:
    """A count of samples: an empty phase has no percentile to print."""
    try:
        count = int(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{value!r} is not a whole number") from exc
    if count < 1:
        raise argparse.ArgumentTypeError("give a count of at least 1")
    return count


class Command(BaseCommand):
    help = (
        "Benchmark remember, hybrid search, jobs, the job's write lock, remember under load and "
        "the review queue on generated data in a temporary database; print figures against "
        "their budgets and optionally write them as JSON."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--sizes",
            type=parse_sizes,
            default=None,
            help="store sizes (memories, and pending proposals for the queue page), as 10000 or "
            "10k; default 10k,100k (with --scale: 10k,100k,1M)",
        )
        parser.add_argument(
            "--scale",
            action="store_true",
            help="the growth run (SQLite): search, recall@5, job overhead, resident memory and "
            "the matrix file at each size, with their growth per 10x; no queue, remember or "
            "load phases. About ten minutes and 8 GB of disk at 10k,100k,1M",
        )
        parser.add_argument("--json", dest="json_path", help="write the figures to this file")
        parser.add_argument(
            "--engine",
            choices=("sqlite", "postgres"),
            default="sqlite",
            help="the store's engine; postgres uses DATABASE_URL's server (a new temporary "
            "database on it) or, when it is unset, an embedded PostgreSQL started for the run",
        )
        parser.add_argument(
            "--throughput-jobs",
            type=int,
            default=150,
            help="jobs for the many-node throughput (3 queue-worker processes)",
        )
        parser.add_argument(
            "--skip-load",
            action="store_true",
            help="skip remember-under-load and the many-node throughput (no qcluster); "
            "their figures are then null",
        )
        parser.add_argument("--remember-calls", type=int, default=500)
        parser.add_argument("--queries", type=int, default=200, help="search queries per size")
        parser.add_argument(
            "--jobs", type=at_least_one, default=30, help="jobs per job measurement"
        )
        parser.add_argument(
            "--holds",
            type=at_least_one,
            default=200,
            help="job writes timed for the lock hold's p50 and p99",
        )
        parser.add_argument("--load-calls", type=int, default=300)
        parser.add_argument(
            "--load-backlog",
            type=int,
            default=1000,
            help="jobs queued for the 2 workers while remember runs under load (jobs_per_s)",
        )
        parser.add_argument(
            "--phase-seconds",
            type=float,
            default=90.0,
            help="stop a measuring loop early after this long (keeping a minimum of samples); "
            "capped loops are listed under the table",
        )
        parser.add_argument(
            "--analyze",
            action="store_true",
            help="what-if: run ANALYZE after loading data (the product never gathers planner "
            "statistics); compare with a default run",
        )
        # Internal: the child process that does the work, and the fake model server.
        parser.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
        parser.add_argument("--serve-fake-model", type=float, help=argparse.SUPPRESS)
        parser.add_argument("--probe-rss", help=argparse.SUPPRESS)

    def handle(self, *args, **options):
        if options["serve_fake_model"] is not None:
            from devtools.bench import serve_fake_model

            serve_fake_model(options["serve_fake_model"])
            return
        if options["probe_rss"]:
            from devtools.bench_scale import probe_rss

            self._inner_only()
            probe_rss(options["probe_rss"])
            return
        if options["sizes"] is None:
            from devtools.bench_scale import SCALE_SIZES

            options["sizes"] = SCALE_SIZES if options["scale"] else [10_000, 100_000]
        if options["scale"] and options["engine"] != "sqlite":
            raise CommandError("--scale measures the shared matrix: SQLite only")
        if options["inner"]:
            self._inner(options)
            return
        self._outer(options)

    # The parent: a temporary directory, the child process, clean-up.
    def _outer(self, options):
        json_path = Path(options["json_path"]).resolve() if options["json_path"] else None
        workdir = Path(tempfile.mkdtemp(prefix="memory-bench-"))
        database = TemporaryDatabase(options["engine"], workdir)
        env = {
            **os.environ,
            **database.env,
            BENCH_DIR_ENV: str(workdir),
            "MEMORY_DATA_DIR": str(workdir),
            "MEMORY_LLM_PROVIDER": "offline",
            "DJANGO_ALLOWED_HOSTS": "localhost,127.0.0.1,testserver",
            "DJANGO_SECRET_KEY": os.environ.get("DJANGO_SECRET_KEY") or secrets.token_urlsafe(40),
            "DJANGO_LOG_LEVEL": os.environ.get("DJANGO_LOG_LEVEL", "WARNING"),
        }
        env.pop("MEMORY_TEST_DB_PATH", None)
        command = [
            sys.executable,
            "manage.py",
            "bench",
            "--inner",
            "--sizes",
            ",".join(str(size) for size in options["sizes"]),
            "--remember-calls",
            str(options["remember_calls"]),
            "--queries",
            str(options["queries"]),
            "--jobs",
            str(options["jobs"]),
            "--holds",
            str(options["holds"]),
            "--load-calls",
            str(options["load_calls"]),
            "--load-backlog",
            str(options["load_backlog"]),
            "--phase-seconds",
            str(options["phase_seconds"]),
            "--throughput-jobs",
            str(options["throughput_jobs"]),
            "--json",
            str(workdir / "figures.json"),
        ]
        if options["skip_load"]:
            command.append("--skip-load")
        if options["scale"]:
            command.append("--scale")
        if options["analyze"]:
            command.append("--analyze")
        self.stdout.write(f"Benchmark database: {database.describe()} (removed at the end)")
        child = None
        previous = signal.signal(signal.SIGTERM, _raise_exit)
        try:
            child = subprocess.Popen(
                command,
                cwd=settings.BASE_DIR,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                bufsize=1,
            )
            for line in child.stdout:
                self.stdout.write(line.rstrip("\n"))
            if child.wait() != 0:
                raise CommandError(f"the benchmark failed (exit status {child.returncode})")
            figures = (workdir / "figures.json").read_text()
            if json_path:
                json_path.parent.mkdir(parents=True, exist_ok=True)
                json_path.write_text(figures)
                self.stdout.write(f"Wrote {json_path}")
        finally:
            signal.signal(signal.SIGTERM, previous)
            if child is not None and child.poll() is None:
                child.terminate()  # the child stops its cluster and fake model server itself
                try:
                    child.wait(timeout=90)
                except subprocess.TimeoutExpired:
                    child.kill()
                    child.wait()
            # A child that died (of a signal, say) never stopped the queue workers it started.
            from devtools.bench import reap_workers

            for pid in reap_workers(workdir):
                self.stderr.write(f"Stopped queue worker {pid}, left running by the benchmark")
            database.drop()
            shutil.rmtree(workdir, ignore_errors=True)

    def _inner_only(self):
        """Refuse to run anywhere but the parent's temporary database."""
        from memory import backend

        workdir = os.environ.get(BENCH_DIR_ENV)
        database = str(settings.DATABASES["default"]["NAME"])
        if backend.is_postgres():
            temporary = database == os.environ.get(BENCH_DB_ENV) and database.startswith(
                "memory_bench_"
            )
        else:
            temporary = bool(workdir) and database.startswith(f"{workdir}{os.sep}")
        if not temporary:
            raise CommandError("--inner runs only inside `manage.py bench` (temporary database)")

    # The child: refuses to run anywhere but the parent's temporary database.
    def _inner(self, options):
        from devtools.bench import Bench, Options

        self._inner_only()
        # SIGTERM unwinds like an exception, so the qcluster and fake server children are stopped.
        signal.signal(signal.SIGTERM, _raise_exit)
        runner = Bench
        if options["scale"]:
            from devtools.bench_scale import ScaleBench as runner
        bench = runner(
            Options(
                sizes=options["sizes"],
                remember_calls=options["remember_calls"],
                queries=options["queries"],
                jobs=options["jobs"],
                holds=options["holds"],
                load_calls=options["load_calls"],
                load_backlog=options["load_backlog"],
                skip_load=options["skip_load"],
                phase_seconds=options["phase_seconds"],
                analyze=options["analyze"],
                throughput_jobs=options["throughput_jobs"],
            ),
            lambda line: self.stdout.write(line),
        )
        figures = bench.run()
        report = bench.bench.report if options["scale"] else bench.report
        self.stdout.write("")
        self.stdout.write(report.table())
        for note in report.notes:
            self.stdout.write(note)
        Path(options["json_path"]).write_text(json.dumps(figures, indent=2) + "\n")


class TemporaryDatabase:
    """Where the child benchmarks: a SQLite file in the work directory, or a new PostgreSQL
    database (on DATABASE_URL's server, else on an embedded server started here); `drop()`
    removes it and stops the server."""

    def __init__(self, engine: str, workdir: Path):
        self.engine = engine
        self.server = None
        self.url = None
        if engine == "sqlite":
            self.path = workdir / "bench.sqlite3"
            self.env = {"DATABASE_URL": "", "MEMORY_DB_PATH": str(self.path)}
            return
        import psycopg

        server_url = os.environ.get("DATABASE_URL", "").strip()
        if not server_url:
            from devtools.pgserver import BENCH_SETTINGS, EmbeddedPostgres

            self.server = EmbeddedPostgres(settings=BENCH_SETTINGS)
            server_url = self.server.start()
        self.name = f"memory_bench_{secrets.token_hex(4)}"
        self.admin_url = server_url
        try:
            with psycopg.connect(server_url, autocommit=True) as admin:
                admin.execute(f'CREATE DATABASE "{self.name}"')
        except Exception:
            self.drop()
            raise
        base, _, query = server_url.partition("?")
        self.url = f"{base.rsplit('/', 1)[0]}/{self.name}" + (f"?{query}" if query else "")
        self.env = {"DATABASE_URL": self.url, BENCH_DB_ENV: self.name}

    def describe(self) -> str:
        if self.engine == "sqlite":
            return str(self.path.parent)
        where = "an embedded PostgreSQL" if self.server else "the DATABASE_URL server"
        return f"PostgreSQL database {self.name} on {where}"

    def drop(self) -> None:
        if self.engine == "postgres" and self.url is not None:
            import psycopg

            try:
                with psycopg.connect(self.admin_url, autocommit=True) as admin:
                    admin.execute(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')
            except Exception:
                pass  # an embedded server goes away whole below
            self.url = None
        if self.server is not None:
            self.server.stop()
            self.server = None
