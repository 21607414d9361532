"""The benchmark behind `manage.py bench`: synthetic data, measurements, budgets, report.

Everything here runs in the *inner* process that `manage.py bench` starts against a throw-away
database (see memory/management/commands/bench.py); nothing in the product imports it.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import random
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from functools import partial
from pathlib import Path

import numpy as np
from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from dashboard.supervisor import die_with, libc_prctl
from devtools import cpu_steal, machine_speed
from memory import backend

SEED = 42
AGENT = "default"
GROW_CHUNK = 100_000  # memories per bulk-load transaction (the default sizes fit in one)

# --- synthetic text --------------------------------------------------------------------------------


def _words(text: str) -> list[str]:
    return text.split()


PEOPLE = _words(
    "Alice Bob Carol Dave Erin Frank Grace Heidi Ivan Judy Mallory Niaj Olivia Peggy Rupert Sybil "
    "Trent Victor Walter Yusuf Zoe Amara Bruno Chen Dmitri Elena Farah Goran Hana Ines Jonas Kenji "
    "Lena Marco Nadia Oskar Priya Quinn Rosa Sven Tomas Uma Vera Wen Xavier Yara Zack Aisha Bilal "
    "Camille Diego Emil Fatima Gustav Hiro Ilse Jamal Kasia Luis Maya Noor"
)
SERVICES = _words(
    "billing auth search checkout notifications payments inventory reporting ingest gateway "
    "scheduler analytics exports profile onboarding ledger pricing shipping catalog recommendations "
    "invoicing webhooks mailer audit sessions uploads thumbnails geocoding fraud-check quotas "
    "metering identity support-desk feature-store data-lake status-page"
)
TOOLS = [
    "Postgres",
    "Redis",
    "Kafka",
    "Grafana",
    "Terraform",
    "Kubernetes",
    "Sentry",
    "Celery",
    "Django",
    "FastAPI",
    "nginx",
    "RabbitMQ",
    "ClickHouse",
    "Prometheus",
    "Vault",
    "Docker",
    "GitHub Actions",
    "pytest",
    "ruff",
    "SQLite",
    "Elasticsearch",
    "S3",
    "Airflow",
    "dbt",
    "Helm",
    "Argo CD",
    "Datadog",
    "PagerDuty",
    "Jenkins",
    "Ansible",
    "Loki",
    "Tempo",
    "OpenTelemetry",
    "Snowflake",
    "BigQuery",
    "Cloudflare",
    "Envoy",
    "Consul",
    "MinIO",
    "Playwright",
]
ENVS = [
    "staging",
    "production",
    "the dev cluster",
    "eu-west",
    "us-east",
    "the canary pool",
    "the batch nodes",
]
TASKS = [
    "background jobs",
    "caching",
    "feature flags",
    "log shipping",
    "schema migrations",
    "load testing",
    "secrets",
    "alerting",
    "tracing",
    "rate limiting",
    "search indexing",
    "backups",
    "session storage",
    "nightly exports",
    "blue-green deploys",
    "contract tests",
    "cost reports",
    "image resizing",
    "retry queues",
    "audit logs",
]
CAUSES = [
    "a missing index",
    "an expired certificate",
    "a full disk",
    "a bad config push",
    "connection pool exhaustion",
    "a memory leak",
    "DNS flapping",
    "a slow query",
    "a race in the retry loop",
    "a stale cache entry",
    "clock skew",
    "an unpinned dependency",
    "a noisy neighbour",
    "a misrouted webhook",
]
DAYS = [
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "the weekend",
    "release days",
]
MONTHS = _words(
    "January February March April May June July August September October November December"
)
PROJECTS = ["OPS", "PAY", "WEB", "DATA", "SEC", "INFRA", "CORE"]

TEMPLATES = [
    ("fact", "{person} moved the {service} service to {tool} on {env}."),
    ("preference", "{person} prefers {tool} over {tool2} for {task}."),
    ("fact", "The {service} deploy on {env} failed because of {cause}; {person} rolled it back."),
    ("decision", "We decided to use {tool} for {task} in the {service} team."),
    ("fact", "{person} owns the {service} runbook and is on call for it on {day}."),
    ("procedural", "Run the {tool} checks before deploying {service} to {env}."),
    ("fact", "The {service} service depends on {service2} for {task}."),
    ("fact", "{person} said the {service} p99 latency budget is {n} ms."),
    ("fact", "Ticket {project}-{n}: {service} times out when {tool} is under load."),
    ("decision", "{person} and {person2} agreed to retire {tool} from {service} by {month}."),
    ("fact", "{service} keeps {task} data for {small} days in {tool}."),
    ("procedural", "Never restart {service} on {env} during business hours; ask {person} first."),
    ("fact", "{person} is the best contact for questions about {tool} and {task}."),
    ("fact", "The {service} dashboard lives in {tool}; {person} reviews it every {day2}."),
    ("fact", "{person} found that {cause} slowed down {service} on {env}."),
    ("procedural", "Pin {tool} to version {small} for {service}; newer releases break {task}."),
    ("preference", "{person} wants {service} alerts routed to {tool} instead of email."),
    ("fact", "{service} on {env} handles about {n} requests per second at peak."),
    ("decision", "The team switched {service} from {tool} to {tool2} after the {month} incident."),
    ("semantic", "In the {service} codebase, a {word} is a batch of {task} waiting for {tool}."),
]
WORDS = ["lane", "bucket", "slot", "ticket", "shard", "window", "cohort", "tranche"]


def sentence(rng: random.Random) -> tuple[str, str]:
    """One realistic short memory (type, text) from a template and the vocabularies."""
    kind, template = rng.choice(TEMPLATES)
    person, person2 = rng.sample(PEOPLE, 2)
    service, service2 = rng.sample(SERVICES, 2)
    tool, tool2 = rng.sample(TOOLS, 2)
    text = template.format(
        person=person,
        person2=person2,
        service=service,
        service2=service2,
        tool=tool,
        tool2=tool2,
        env=rng.choice(ENVS),
        task=rng.choice(TASKS),
        cause=rng.choice(CAUSES),
        day=rng.choice(DAYS),
        day2=rng.choice(DAYS[:5]),
        month=rng.choice(MONTHS),
        project=rng.choice(PROJECTS),
        n=rng.randint(20, 9999),
        small=rng.randint(2, 90),
        word=rng.choice(WORDS),
    )
    return kind, text[0].upper() + text[1:]


class Corpus:
    """Unique sentences in a fixed order: the store takes a prefix, everything else is held out."""

    def __init__(self, seed: int = SEED):
        self.rng = random.Random(seed)
        self.seen: set[str] = set()
        self.items: list[tuple[str, str]] = []

    def _fresh(self) -> tuple[str, str]:
        while True:
            kind, text = sentence(self.rng)
            key = text.lower().rstrip(".")
            if key not in self.seen:
                self.seen.add(key)
                return kind, text

    def store(self, count: int) -> list[tuple[str, str]]:
        """The first `count` store sentences (generated on demand)."""
        while len(self.items) < count:
            self.items.append(self._fresh())
        return self.items[:count]

    def held_out(self, count: int) -> list[str]:
        """Sentences never stored (queries, new memories): drawn after the store's reservation."""
        return [self._fresh()[1] for _ in range(count)]

    def note(self, sentences: int) -> str:
        """A raw memory an agent might write: several unique sentences in one text."""
        return " ".join(self.held_out(sentences))


# --- statistics and budgets ---------------------------------------------------------------------------


def pct(values: list[float], q: float) -> float:
    return round(float(np.percentile(np.asarray(values, dtype=np.float64), q)), 3)


def ms_since(started: float) -> float:
    return (time.perf_counter() - started) * 1000


class Cap:
    """Stop a measuring loop after `seconds`, but never before `minimum` samples."""

    def __init__(self, seconds: float, minimum: int):
        self.end = time.monotonic() + seconds
        self.minimum = minimum

    def reached(self, samples: int) -> bool:
        return samples >= self.minimum and time.monotonic() > self.end


@dataclass
class Row:
    figure: str
    value: str
    budget: str = ""
    ok: bool | None = None  # None: informative only


@dataclass
class Report:
    rows: list[Row] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def add(self, figure: str, value: str, budget: str = "", ok: bool | None = None) -> None:
        self.rows.append(Row(figure, value, budget, ok))

    def table(self) -> str:
        width = max(len(r.figure) for r in self.rows) + 2
        vwidth = max(len(r.value) for r in self.rows) + 2
        bwidth = max([len(r.budget) for r in self.rows] + [6]) + 2
        lines = [
            f"{'Figure':<{width}}{'Value':>{vwidth}}  {'Budget':<{bwidth}}Result",
            "-" * (width + vwidth + bwidth + 8),
        ]
        for r in self.rows:
            mark = "" if r.ok is None else ("ok" if r.ok else "OVER")
            lines.append(f"{r.figure:<{width}}{r.value:>{vwidth}}  {r.budget:<{bwidth}}{mark}")
        return "\n".join(lines)


STEAL_ROWS = {
    "whole_run": "CPU time the host gave to other guests (steal), whole run",
    "job_phases": "  of it during the job phases (overhead, lock hold, latency)",
}


def report_steal(report: Report, shares: dict[str, float | None]) -> dict[str, float | None]:
    """Rows for the steal shares (devtools.cpu_steal; the whole run's, "whole_run", checked
    against a quiet machine's), and a note when the run was not quiet; the shares rounded, for
    the JSON."""
    for key, share in shares.items():
        checked = key == "whole_run" and share is not None
        report.add(
            STEAL_ROWS[key],
            "n/a" if share is None else f"{share * 100:.1f} %",
            f"<= {cpu_steal.QUIET_SHARE * 100:g} % (quiet)" if checked else "",
            share <= cpu_steal.QUIET_SHARE if checked else None,
        )
    whole = shares.get("whole_run")
    if whole is not None and whole > cpu_steal.QUIET_SHARE:
        report.notes.append(
            f"NOT A QUIET MACHINE: the host ran other guests for {whole * 100:.0f} % of the CPU "
            "time this run wanted, so every phase ran slower; judge the time budgets on a run "
            "where the steal share is ok."
        )
    return {key: None if share is None else round(share, 3) for key, share in shares.items()}


REFERENCE_ROW = "  a reference workload just before each job (Python, numpy, SQLite): p50"
SCALED_ROW = (
    f"  job overhead at a quiet machine's speed (each job x {machine_speed.QUIET_MS:g} ms / its "
    "reference): p50"
)


def report_slowness(
    report: Report, references: list[float], figure: str = REFERENCE_ROW
) -> dict[str, float | None]:
    """A row for the reference workload timed just before each job (devtools.machine_speed), its
    p50 checked against a quiet machine's, and a note when the machine was slower; the figures,
    for the JSON."""
    slowness, quiet = machine_speed.slowness(references), machine_speed.is_quiet(references)
    reference = pct(references, 50) if references else None
    report.add(
        figure,
        "n/a" if reference is None else f"{reference:.2f} ms",
        f"<= {machine_speed.QUIET_MS * machine_speed.SLOW_RATIO:g} ms (quiet)",
        quiet,
    )
    if quiet is False:
        report.notes.append(
            f"NOT A QUIET MACHINE: during the job-overhead phase a fixed reference workload took "
            f"{slowness:.2f}x its estimated time on a quiet machine (QUIET_MS, "
            "devtools/machine_speed.py), steal time or not: the job figures were taken on a slow "
            "machine; judge the time budgets on a run where this check is ok. The job overhead "
            "at a quiet machine's speed compares this run with others."
        )
    return {
        "quiet_ms": machine_speed.QUIET_MS,
        "job_reference_p50_ms": reference,
        "slowness": slowness,
    }


BUDGETS = {
    "remember_p50": 5.0,
    "remember_p99": 20.0,
    "search_p50": 15.0,
    "recall": 0.98,  # exact search on SQLite (matrix or vec0)
    "recall_hnsw": 0.95,  # approximate search on PostgreSQL (pgvector HNSW)
    "keyword_recall": 0.95,  # the keyword leg's top 10 against the exhaustive BM25 ranking
    "matrix_mib": 100.0,  # the shared matrix resident in one process (100k x 768)
    "statements": 20,  # inside the job's write, 10 facts
    "latency_slack": 40.0,  # job latency beyond extraction + embedding + one decision round
    "job_p50": 30.0,
    "job_p50_postgres": 60.0,  # a round trip per statement and the server's own work
    "lock_p99": 10.0,
    "load_p99": 50.0,
    "queue_p50": 100.0,
    "eval_case": 20.0,  # manage.py eval: our own time per case of the shipped set, 0-latency model
    "export_seconds": 10.0,  # manage.py export of the whole store (100k), the command's wall time
    "export_rss_growth_mib": 32.0,  # its peak RSS beyond an export of nothing: flat, it streams
    "import_seconds": 60.0,  # manage.py import of 100k raw memories, without processing
    "purge": 250.0,  # one memory with 50 audit rows, verification included (SQLite)
}
PURGE_SAMPLES = 5  # memories purged, each with its 50 audit rows
IMPORT_MAX = 100_000  # raw memories the import phase brings in (fewer when the sizes are smaller)
# `manage.py export ARGS`, then the process's own peak RSS (VmHWM) on stderr.
EXPORT_CHILD = (
    "import os, sys; os.environ.setdefault('DJANGO_SETTINGS_MODULE', 'config.settings'); "
    "from django.core.management import execute_from_command_line; "
    "execute_from_command_line(['manage.py', 'export', *sys.argv[1:]]); "
    "sys.stderr.write(next(l for l in open('/proc/self/status') if l.startswith('VmHWM')))"
)


def engine_modules():
    """The store engine's vector and keyword modules (what a job's search calls through)."""
    if on_postgres():
        from memory.keyword import postgres as keyword_module
        from memory.vectors import postgres as vector_module
    else:
        from memory.keyword import sqlite as keyword_module
        from memory.vectors import sqlite as vector_module
    return vector_module, keyword_module


def on_postgres() -> bool:
    return backend.is_postgres()


def vacuum_like_autovacuum() -> None:
    """On PostgreSQL, what autovacuum does soon after a bulk load (planner statistics, the
    visibility map for index-only counts), done at once: the benchmark measures that steady
    state, not the minute before it. SQLite has no such process; nothing happens there."""
    if on_postgres():
        with connection.cursor() as cursor:
            cursor.execute("VACUUM ANALYZE")


def explain_prefix() -> str:
    return "EXPLAIN " if on_postgres() else "EXPLAIN QUERY PLAN "


def label(size: int) -> str:
    if size >= 1_000_000 and size % 1_000_000 == 0:
        return f"{size // 1_000_000}M"
    return f"{size // 1000}k" if size >= 1000 and size % 1000 == 0 else str(size)


# --- the fake model server (runs in its own process) -------------------------------------------------

_SENTENCE_END = re.compile(r"(?<=\.)\s+")


def scripted_chat(payload: dict) -> str:
    """The model: extraction returns the note's sentences as facts, every decision is an ADD.
    (`delay` is served by the server around the whole answer: see `serve_fake_model`.)"""
    schema = json.dumps(payload.get("format") or {})
    prompt = payload["messages"][-1]["content"]
    if '"facts"' in schema:
        text = prompt.rsplit("Text:", 1)[1].strip()
        facts = [
            {"content": part.strip(), "type": "fact", "confidence": 0.9}
            for part in _SENTENCE_END.split(text)
            if len(part.strip()) >= 10
        ][:10]
        return json.dumps({"facts": facts, "entities": []})
    return json.dumps(
        {"action": "add", "targetId": None, "confidence": 0.8, "reason": "bench: new information"}
    )


def serve_fake_model(delay: float) -> None:
    """Run tests.fake_ollama with `scripted_chat` until stdin closes or SIGTERM; print the URL.
    Every model call takes `delay` seconds: chat and embedding alike."""
    from tests.fake_ollama import FakeOllama

    class SlowEmbeddings(FakeOllama):
        def _handler(self):
            handler = super()._handler()
            # Like Ollama (and any HTTP/1.1 server): connections stay open between calls, so the
            # pooled client does not pay a TCP connect and a new server thread per model call.
            handler.protocol_version = "HTTP/1.1"
            handler.disable_nagle_algorithm = True  # headers and body go out in separate writes
            return handler

        def _default(self, path: str, payload: dict):
            # Each call takes `delay` in all, the fake's own work (embedding the texts, mostly)
            # included: a model that answers in 200 ms, not one that thinks 200 ms and then
            # spends the benchmark's time on Python.
            started = time.perf_counter()
            answer = super()._default(path, payload)
            if isinstance(answer, dict | list):
                # Its JSON too (4 ms for eleven 768-d vectors in Python; Ollama's Go writes it in
                # well under one): the answer leaves when the call's time is up.
                answer = json.dumps(answer)
            if delay:
                time.sleep(max(0.0, delay - (time.perf_counter() - started)))
            return answer

    server = SlowEmbeddings(settings.MEMORY_EMBEDDING_DIMENSIONS)
    server.chat_handler = scripted_chat
    server.start()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    print(server.url, flush=True)
    try:
        sys.stdin.read()
    finally:
        server.stop()


class FakeModelProcess:
    """The fake Ollama in a child process, so its JSON work never shares our GIL or core."""

    def __init__(self, delay: float):
        self.proc = subprocess.Popen(
            [sys.executable, "manage.py", "bench", "--serve-fake-model", str(delay)],
            cwd=settings.BASE_DIR,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.url = self.proc.stdout.readline().strip()
        if not self.url.startswith("http://"):
            self.stop()
            raise RuntimeError("the fake model server did not start")

    def cpu_seconds(self) -> float:
        """CPU time the fake server has used so far (its own work: JSON, embeddings), from /proc;
        0.0 where /proc is not available."""
        try:
            with open(f"/proc/{self.proc.pid}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:
            return 0.0
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


# --- the benchmark ----------------------------------------------------------------------------------


@dataclass
class Options:
    sizes: list[int]
    remember_calls: int = 500
    queries: int = 200
    jobs: int = 30
    # Job writes timed for the lock hold: its p99 needs a few hundred (of 30 it was their longest).
    holds: int = 200
    load_calls: int = 300
    load_interval_ms: float = 40.0
    load_backlog: int = 1000  # jobs waiting for the 2 workers while remember runs under load
    queue_requests: int = 20
    skip_load: bool = False
    # A loop stops early once it ran this long and has its minimum of samples: a pathological
    # slowness (seconds per call) must not turn one run into an hour. Capped loops are reported.
    phase_seconds: float = 90.0
    # What-if: planner statistics (ANALYZE) after each load, which the product never gathers.
    analyze: bool = False
    # Jobs run by 3 queue-worker processes (zero-latency model) for the many-node throughput.
    throughput_jobs: int = 150


class Bench:
    def __init__(self, options: Options, out: Callable[[str], None]):
        self.o = options
        self.out = out
        self.corpus = Corpus()
        self.size = 0
        self.dims = settings.MEMORY_EMBEDDING_DIMENSIONS
        # Stored vectors carry the name the (fake) Ollama embedder uses, so jobs, workers and the
        # search phase all query one model and one matrix.
        self.model = settings.MEMORY_EMBEDDING_MODEL
        from pipeline.llm.offline import OfflineEmbedder

        self.embedder = OfflineEmbedder(self.dims, model=self.model)
        self.report = Report()
        self.results: dict = {"search": {}, "queue_page": {}, "export": {}}
        self.memory_ids: list[str] = []
        self.token = ""

    def log(self, message: str) -> None:
        self.out(f"[bench {time.strftime('%H:%M:%S')}] {message}")

    def capped(self, what: str, samples: int, planned: int) -> None:
        message = (
            f"{what}: stopped after {samples} of {planned} samples "
            f"(ran past --phase-seconds {self.o.phase_seconds:g})"
        )
        self.report.notes.append("CAPPED " + message)
        self.log(message)

    # -- setup ---------------------------------------------------------------------------------------
    def setup(self) -> None:
        from django.contrib.auth.models import Group, User
        from django.core.management import call_command

        from api.auth import create_token
        from dashboard.roles import ensure_role_groups
        from memory.models import Entity
        from pipeline.writes.config import update_config

        started = time.perf_counter()
        call_command("migrate", verbosity=0, interactive=False)
        self.log(f"migrated the temporary database in {ms_since(started) / 1000:.1f} s")
        ensure_role_groups()
        reviewer = User.objects.create_user(
            "bench-reviewer", password="unused-" + os.urandom(8).hex()
        )
        reviewer.groups.add(Group.objects.get(name="reviewer"))
        self.reviewer = reviewer
        _, self.token = create_token("bench-agent", agent_id=AGENT, scopes=["ingest"])
        now = timezone.now()
        from memory.linker import canonical_name

        # Known people and tools, so the inline linker has entities to link at remember time.
        Entity.objects.bulk_create(
            [
                Entity(
                    name=name,
                    canonical_name=canonical_name(name),
                    entity_type=kind,
                    agent_id=AGENT,
                    created_at=now,
                    updated_at=now,
                )
                for kind, names in (("person", PEOPLE), ("tool", TOOLS))
                for name in names
            ]
        )
        # Controlled-write: confident ADDs are written, so the job's transaction does real work.
        update_config({"shadowMode": False}, changed_by="bench", reason="benchmark run")

    def grow_store(self, target: int) -> None:
        """Bulk-insert memories (FTS by trigger), audits, embeddings and their vec0 rows, in
        chunks of GROW_CHUNK (one transaction each), so a million memories fit in memory."""
        items = self.corpus.store(target)[self.size :]
        if not items:
            return
        embed_ms = write_ms = 0.0
        for first in range(0, len(items), GROW_CHUNK):
            chunk = items[first : first + GROW_CHUNK]
            spent = self._grow_chunk(chunk, len(items) - first)
            embed_ms, write_ms = embed_ms + spent[0], write_ms + spent[1]
            if len(items) > GROW_CHUNK:
                self.log(f"  {self.size + first + len(chunk):,} memories written")
        if on_postgres():
            vacuum_like_autovacuum()
        elif self.o.analyze:
            with connection.cursor() as cursor:
                cursor.execute("ANALYZE")
        self.log(
            f"store {self.size:,} -> {target:,} memories: embedded in {embed_ms / 1000:.1f} s, "
            f"written in {write_ms / 1000:.1f} s"
        )
        self.size = target

    def _grow_chunk(self, items: list[tuple[str, str]], age_rank: int) -> tuple[float, float]:
        """One transaction of new memories; returns (embedding ms, writing ms)."""
        from memory.content import normalize
        from memory.models import Embedding, ExtractionStatus, Memory, MemoryHistory
        from memory.vectors import vector_to_blob

        started = time.perf_counter()
        blobs = [vector_to_blob(self.embedder.embed_one(text)) for _, text in items]
        embed_ms = ms_since(started)
        now = timezone.now()
        memories, audits, embeddings = [], [], []
        for index, ((kind, text), blob) in enumerate(zip(items, blobs, strict=True)):
            content = normalize(text)
            at = now - timedelta(seconds=(age_rank - index) * 7)
            memory = Memory(
                content=content.storage,
                normalized_content=content.normalized,
                content_hash=content.hash,
                type=kind,
                who="bench-agent",
                why="bench",
                agent_id=AGENT,
                source_type="manual",
                extraction_status=ExtractionStatus.COMPLETED,
                embedding_model=self.model,
                created_at=at,
                updated_at=at,
                updated_by="bench-agent",
            )
            memories.append(memory)
            audits.append(
                MemoryHistory(
                    memory=memory,
                    event="created",
                    new_content=memory.content,
                    changed_by="bench-agent",
                    actor_type="agent",
                    reason="remember",
                    created_at=at,
                )
            )
            embeddings.append(
                Embedding(
                    content_hash=memory.content_hash,
                    vector=blob,
                    dimensions=self.dims,
                    model=self.model,
                    source_memory=memory,
                    created_at=at,
                )
            )
        started = time.perf_counter()
        with transaction.atomic():
            Memory.objects.bulk_create(memories, batch_size=1000)
            MemoryHistory.objects.bulk_create(audits, batch_size=1000)
            Embedding.objects.bulk_create(embeddings, batch_size=1000)
            if any(e.id is None for e in embeddings):
                ids = dict(
                    Embedding.objects.filter(
                        content_hash__in=[e.content_hash for e in embeddings]
                    ).values_list("content_hash", "id")
                )
                for e in embeddings:
                    e.id = ids[e.content_hash]
            if on_postgres():
                from memory.vectors import postgres as vectors_postgres

                vectors_postgres.bulk_index(
                    (e.id, np.frombuffer(e.vector, dtype=np.float32)) for e in embeddings
                )
            else:
                with connection.cursor() as cursor:
                    cursor.executemany(
                        "INSERT INTO vec_embeddings(rowid, embedding, model) VALUES (%s, %s, %s)",
                        [(e.id, e.vector, self.model) for e in embeddings],
                    )
        self.memory_ids.extend(m.id for m in memories)
        return embed_ms, ms_since(started)

    # -- search -----------------------------------------------------------------------------------
    def measure_search(self, size: int) -> None:
        from memory import matrix, vectors
        from memory.search import hybrid_search

        texts = self.corpus.held_out(self.o.queries)
        queries = [self.embedder.embed_one(text) for text in texts]
        # The first query after the load brings the machine's shared matrix file up to date (a
        # full build after a bulk load); a process started afterwards only maps the file.
        matrix.INDEX = matrix.MatrixIndex()
        started = time.perf_counter()
        vectors.nearest(queries[0], model=self.model, k=5)
        load_ms = ms_since(started)
        matrix.INDEX = matrix.MatrixIndex()
        started = time.perf_counter()
        vectors.nearest(queries[1], model=self.model, k=5)
        map_ms = ms_since(started)
        engine = vectors.search_engine()
        timings = []
        cap = Cap(self.o.phase_seconds, 30)
        for text, vector in zip(texts, queries, strict=True):
            started = time.perf_counter()
            hybrid_search(text, agent_id=AGENT, k=5, query_vector=vector, model=self.model)
            timings.append(ms_since(started))
            if cap.reached(len(timings)):
                self.capped(f"hybrid search @ {label(size)}", len(timings), len(texts))
                break
        legs = self._search_legs(texts[:5], queries[:5])
        found = [[eid for eid, _ in vectors.nearest(v, model=self.model, k=5)] for v in queries]
        recall = exact_recall(np.vstack(queries), found, self.model, k=5)
        hybrid_recall, keyword_recall = self._hybrid_recall(texts[:30], queries[:30])
        figures = {
            "p50_ms": pct(timings, 50),
            "p95_ms": pct(timings, 95),
            "recall_at_5": round(recall, 4),
            "hybrid_recall_at_5": round(hybrid_recall, 4),
            "keyword_recall_at_10": round(keyword_recall, 4),
        }
        if engine == "matrix":
            figures["matrix"] = {
                "resident_mib_per_process": round(matrix.INDEX.resident_bytes() / 2**20, 1),
                "file_mib_per_machine": round(matrix.INDEX.memory_bytes() / 2**20, 1),
                "update_ms": round(load_ms, 1),
                "map_ms": round(map_ms, 1),
            }
        self.results["search"][str(size)] = figures
        tag = label(size)
        self.report.add(
            f"hybrid search top-5 @ {tag}: p50",
            f"{figures['p50_ms']:.2f} ms",
            f"<= {BUDGETS['search_p50']:g} ms",
            figures["p50_ms"] <= BUDGETS["search_p50"],
        )
        self.report.add(f"hybrid search top-5 @ {tag}: p95", f"{figures['p95_ms']:.2f} ms")
        recall_budget = BUDGETS["recall_hnsw" if engine == "hnsw" else "recall"]
        self.report.add(
            f"vector leg recall@5 vs exact @ {tag} ({engine})",
            f"{figures['recall_at_5']:.3f}",
            f">= {recall_budget:g}",
            figures["recall_at_5"] >= recall_budget,
        )
        self.report.add(
            f"hybrid recall@5 vs exhaustive keyword leg @ {tag} (30 queries)",
            f"{hybrid_recall:.3f}",
            f">= {BUDGETS['recall']:g}",
            hybrid_recall >= BUDGETS["recall"],
        )
        self.report.add(
            f"keyword leg recall@10 vs exhaustive BM25 @ {tag} (30 queries)",
            f"{keyword_recall:.3f}",
            f">= {BUDGETS['keyword_recall']:g}",
            keyword_recall >= BUDGETS["keyword_recall"],
        )
        for name, values in legs.items():
            self.report.add(f"  {name} @ {tag}: p50", f"{pct(values, 50):.2f} ms")
        if engine == "matrix":
            shared = figures["matrix"]
            self.report.add(
                f"shared matrix resident per process @ {tag}",
                f"{shared['resident_mib_per_process']:.1f} MiB",
                f"<= {BUDGETS['matrix_mib']:g} MiB",
                shared["resident_mib_per_process"] <= BUDGETS["matrix_mib"],
            )
            self.report.add(
                f"  per machine (one file in the page cache) @ {tag}",
                f"{shared['file_mib_per_machine']:.1f} MiB",
            )
            self.report.add(
                f"  file brought up to date after the load / mapped by a new process @ {tag}",
                f"{load_ms:.0f} / {map_ms:.1f} ms",
            )
        else:
            self.report.add(f"first vector query ({engine}) @ {tag}", f"{load_ms:.0f} ms")
        self.log(
            f"search @ {tag}: p50 {figures['p50_ms']:.2f} ms, p95 {figures['p95_ms']:.2f} ms, "
            f"recall@5 {recall:.3f}, hybrid recall@5 {hybrid_recall:.3f}, "
            f"first query {load_ms:.0f} ms, map {map_ms:.1f} ms"
        )

    def _hybrid_recall(self, texts: list[str], queries: list[np.ndarray]) -> tuple[float, float]:
        """What the keyword leg's candidate window keeps: the share of the hybrid top 5 that the
        same search with every matching memory scored (the exhaustive keyword leg) finds, and the
        share of the exhaustive BM25 top 10 (every live memory scored in Python, the leg's
        formula and statistics) in the keyword leg's own top 10."""
        from memory import keyword
        from memory.search import hybrid_search

        def top(text, vector):
            hits = hybrid_search(text, agent_id=AGENT, k=5, query_vector=vector, model=self.model)
            return [hit.memory_id for hit in hits]

        def keyword_top():
            found = keyword.search_many(texts, agent_id=AGENT, limit=10)
            return [[memory_id for memory_id, _ in hits] for hits in found]

        fast = [top(t, v) for t, v in zip(texts, queries, strict=True)]
        fast_keyword = keyword_top()
        saved = keyword.CANDIDATE_WINDOW
        keyword.CANDIDATE_WINDOW = 1 << 62  # every memory holding a query word is scored
        try:
            exhaustive = [top(t, v) for t, v in zip(texts, queries, strict=True)]
        finally:
            keyword.CANDIDATE_WINDOW = saved
        exhaustive_keyword = exhaustive_bm25(texts, k=10)

        def kept(found, truth):
            hits = sum(len(set(a) & set(b)) for a, b in zip(found, truth, strict=True))
            return hits / max(1, sum(len(b) for b in truth))

        return kept(fast, exhaustive), kept(fast_keyword, exhaustive_keyword)

    def _search_legs(self, texts: list[str], queries: list[np.ndarray]) -> dict[str, list[float]]:
        """Where a hybrid search spends its time, leg by leg (a few queries)."""
        from memory import keyword, vectors

        legs: dict[str, list[float]] = {
            "keyword leg (tsvector, BM25)" if on_postgres() else "keyword leg (FTS5 bm25)": [],
            "vector KNN k=40 (vectors.nearest)": [],
            "vector ids -> live memories (live_memories_for)": [],
        }
        if not on_postgres():  # SQLite only: CROSS JOIN fixes the join order
            legs["  same join driven by e.id (CROSS JOIN)"] = []
        names = list(legs)
        for text, vector in zip(texts, queries, strict=True):
            started = time.perf_counter()
            keyword.search(text, agent_id=AGENT, limit=10)
            legs[names[0]].append(ms_since(started))
            started = time.perf_counter()
            neighbours = vectors.nearest(vector, model=self.model, k=40)
            legs[names[1]].append(ms_since(started))
            ids = [eid for eid, _ in neighbours]
            started = time.perf_counter()
            vectors.live_memories_for(ids, agent_id=AGENT, exclude_id=None)
            legs[names[2]].append(ms_since(started))
            marks = ",".join(["%s"] * len(ids))
            if on_postgres():
                continue
            started = time.perf_counter()
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT e.id, m.id FROM embeddings e CROSS JOIN memories m "
                    "ON m.content_hash = e.content_hash "
                    f"WHERE e.id IN ({marks}) AND m.is_deleted = 0 AND m.agent_id = %s",
                    [*ids, AGENT],
                )
                cursor.fetchall()
            legs[names[3]].append(ms_since(started))
        if not on_postgres() and not getattr(self, "join_plan_noted", False):
            self.join_plan_noted = True
            marks = ",".join(["%s"] * len(ids))
            live = "NOT m.is_deleted" if on_postgres() else "m.is_deleted = 0"
            with connection.cursor() as cursor:
                cursor.execute(
                    explain_prefix() + "SELECT e.id, m.id FROM embeddings e JOIN memories m "
                    "ON m.content_hash = e.content_hash "
                    f"WHERE e.id IN ({marks}) AND {live} AND m.agent_id = %s",
                    [*ids, AGENT],
                )
                plan = [str(row[-1]) for row in cursor.fetchall()]
            stats = "with ANALYZE" if self.o.analyze else "no ANALYZE run by the benchmark"
            self.report.notes.append(
                f"Plan of vectors.live_memories_for ({stats}): " + " | ".join(plan)
            )
        return legs

    # -- queue page -------------------------------------------------------------------------------------
    def fill_queue(self, size: int) -> None:
        """Top the pending proposals up to `size` (one job per 1,000 proposals)."""
        from memory.models import Job, JobStatus, Memory
        from pipeline.models import RISK_OF, Proposal, ProposalStatus

        missing = size - Proposal.objects.filter(status=ProposalStatus.PENDING).count()
        if missing <= 0:
            return
        rng = random.Random(SEED + size)
        facts = self.corpus.held_out(min(missing, 5000))
        now = timezone.now()
        started = time.perf_counter()
        with transaction.atomic():
            targets = dict(
                Memory.objects.filter(
                    id__in=rng.sample(self.memory_ids, min(2000, len(self.memory_ids)))
                ).values_list("id", "content")
            )
            target_ids = list(targets)
            proposals, job = [], None
            for index in range(missing):
                if index % 1000 == 0:
                    source_id = rng.choice(self.memory_ids)
                    job = Job.objects.create(
                        memory_id=source_id,
                        status=JobStatus.COMPLETED,
                        attempts=1,
                        completed_at=now,
                        created_at=now,
                        updated_at=now,
                    )
                    if len(proposals) >= GROW_CHUNK:  # a million proposals, a chunk at a time
                        Proposal.objects.bulk_create(proposals, batch_size=1000)
                        proposals = []
                action = rng.choices(["add", "update", "delete"], weights=[6, 3, 1])[0]
                target = rng.choice(target_ids) if action != "add" else None
                at = now - timedelta(seconds=rng.randint(0, 14 * 86400))
                proposals.append(
                    Proposal(
                        job=job,
                        source_memory_id=job.memory_id,
                        agent_id=AGENT,
                        action=action,
                        fact_content=facts[index % len(facts)],
                        fact_type="fact",
                        fact_confidence=round(rng.uniform(0.4, 1.0), 2),
                        target_memory_id=target,
                        target_version=1 if target else None,
                        target_content=targets[target] if target else None,
                        confidence=round(rng.uniform(0.5, 1.0), 2),
                        reason="bench: the model proposed it",
                        status=ProposalStatus.PENDING,
                        blocked_reason="shadow_mode",
                        model="qwen3:4b",
                        mode="shadow",
                        position=index % 1000,
                        risk=RISK_OF[action],
                        created_at=at,
                        updated_at=at,
                    )
                )
            Proposal.objects.bulk_create(proposals, batch_size=1000)
        vacuum_like_autovacuum()
        self.log(f"queue: {missing:,} pending proposals added in {ms_since(started) / 1000:.1f} s")

    def measure_queue(self, size: int) -> None:
        from django.test import Client
        from django.test.utils import CaptureQueriesContext

        self.fill_queue(size)
        client = Client(HTTP_HOST="localhost")
        client.force_login(self.reviewer)
        for _ in range(2):  # warm caches and template loading
            response = client.get("/review/")
            if response.status_code != 200:
                raise RuntimeError(f"/review/ answered {response.status_code}")
        timings, counts = [], set()
        for _ in range(self.o.queue_requests):
            with CaptureQueriesContext(connection) as captured:
                started = time.perf_counter()
                response = client.get("/review/")
                timings.append(ms_since(started))
            counts.add(len(captured.captured_queries))
        slowest = profile_queries(lambda: client.get("/review/"))
        tag = label(size)
        figures = {"p50_ms": pct(timings, 50), "queries": max(counts)}
        self.results["queue_page"][str(size)] = figures
        self.report.add(
            f"review queue page @ {tag} pending: p50",
            f"{figures['p50_ms']:.1f} ms",
            f"<= {BUDGETS['queue_p50']:g} ms",
            figures["p50_ms"] <= BUDGETS["queue_p50"],
        )
        first = next(iter(self.results["queue_page"].values()))["queries"]
        self.report.add(
            f"review queue page @ {tag}: queries",
            str(figures["queries"]) + ("" if len(counts) == 1 else f" (varied {sorted(counts)})"),
            f"= {first} (smallest size)",
            figures["queries"] == first and len(counts) == 1,
        )
        self.log(
            f"queue page @ {tag}: p50 {figures['p50_ms']:.1f} ms, {figures['queries']} queries"
        )
        self.queue_profiles = getattr(self, "queue_profiles", {})
        self.queue_profiles[size] = slowest

    # -- purge ----------------------------------------------------------------------------------------
    def _fifty_audit_rows(self, memory_id: str) -> None:
        """A store memory's history grown to 50 rows: its creation, 9 edits (each with its cold
        copy) and 40 agent reports."""
        from memory import feedback, writes
        from memory.models import Memory
        from memory.writes import Actor

        editor, agent = Actor("bench-editor", "operator"), Actor("bench-agent", "agent")
        content = Memory.objects.values_list("content", flat=True).get(id=memory_id)
        for n in range(1, 10):
            writes.modify(
                memory_id, {"content": f"{content} (revision {n})"}, actor=editor, reason="edit"
            )
        for n in range(40):
            feedback.record_feedback(memory_id, actor=agent, verdict="used", note=f"run {n}")

    def measure_purge(self) -> None:
        """Purge of one memory with 50 audit rows on the store as it is (the largest size): the
        whole call, erasure and verification (every table scanned, the log and the pages written
        since the last checkpoint read as bytes), each sample a memory of its own."""
        from memory.models import MemoryHistory
        from memory.writes import Actor
        from pipeline.purge import purge_memories

        rng = random.Random(SEED + 22)
        admin = Actor("bench-admin", "operator")
        timings, verified = [], True
        for memory_id in rng.sample(self.memory_ids, PURGE_SAMPLES):
            self._fifty_audit_rows(memory_id)
            assert MemoryHistory.objects.filter(memory_id=memory_id).count() == 50
            started = time.perf_counter()
            receipt = purge_memories([memory_id], reason="bench: purge", actor=admin)
            timings.append(ms_since(started))
            verified = verified and receipt.verified
        figures = {
            "p50_ms": pct(timings, 50),
            "max_ms": round(max(timings), 3),
            "audit_rows": 50,
            "verified": verified,
        }
        self.results["purge"] = figures
        tag = label(self.size)
        on_sqlite = not on_postgres()  # the budget is SQLite's
        self.report.add(
            f"purge of one memory with 50 audit rows, verified @ {tag}: p50",
            f"{figures['p50_ms']:.1f} ms",
            f"<= {BUDGETS['purge']:g} ms" if on_sqlite else "",
            figures["p50_ms"] <= BUDGETS["purge"] if on_sqlite else None,
        )
        self.report.add(f"  purge: slowest of {PURGE_SAMPLES}", f"{figures['max_ms']:.1f} ms")
        if not verified:
            self.report.notes.append("purge: a receipt was not verified (see the tombstones)")
        self.log(f"purge @ {tag}: p50 {figures['p50_ms']:.1f} ms, verified {verified}")

    # -- remember -------------------------------------------------------------------------------------
    def _remember_client(self):
        from django.test import Client

        client = Client(HTTP_HOST="localhost")
        auth = {"HTTP_AUTHORIZATION": f"Bearer {self.token}"}

        def call(text: str) -> tuple[float, int]:
            started = time.perf_counter()
            response = client.post(
                "/api/memory/remember",
                data=json.dumps({"content": text, "who": "bench-agent"}),
                content_type="application/json",
                **auth,
            )
            return ms_since(started), response.status_code

        return call

    def measure_remember(self) -> None:
        call = self._remember_client()
        texts = self.corpus.held_out(self.o.remember_calls + 20)
        for text in texts[:20]:
            call(text)
        timings, failures = [], 0
        started = time.perf_counter()
        cap = Cap(self.o.phase_seconds, 100)
        for text in texts[20:]:
            elapsed, status = call(text)
            timings.append(elapsed)
            failures += status != 201
            if cap.reached(len(timings)):
                self.capped("remember", len(timings), len(texts) - 20)
                break
        wall = time.perf_counter() - started
        figures = {
            "p50_ms": pct(timings, 50),
            "p99_ms": pct(timings, 99),
            "per_s": round(len(timings) / wall, 1),
        }
        self.results["remember"] = figures
        tag = label(self.size)
        self.report.add(
            f"remember (API, in-process) @ {tag}: p50",
            f"{figures['p50_ms']:.2f} ms",
            f"<= {BUDGETS['remember_p50']:g} ms",
            figures["p50_ms"] <= BUDGETS["remember_p50"],
        )
        self.report.add(
            f"remember (API, in-process) @ {tag}: p99",
            f"{figures['p99_ms']:.2f} ms",
            f"<= {BUDGETS['remember_p99']:g} ms",
            figures["p99_ms"] <= BUDGETS["remember_p99"],
        )
        self.report.add("remember throughput, one thread", f"{figures['per_s']:.0f} /s")
        # Diagnostic, not a product figure: the same calls with persistent connections. With
        # CONN_MAX_AGE=0 every request opens a connection (loading sqlite-vec), and django-q2's ORM
        # broker closes it again inside async_task (close_old_connections) during the hand-off.
        saved = connection.settings_dict.get("CONN_MAX_AGE", 0)
        connection.close()
        connection.settings_dict["CONN_MAX_AGE"] = None
        try:
            persistent = [call(text)[0] for text in self.corpus.held_out(min(200, len(timings)))]
        finally:
            connection.close()
            connection.settings_dict["CONN_MAX_AGE"] = saved
        self.report.add(
            "  same with persistent connections (CONN_MAX_AGE=None): p50 / p99",
            f"{pct(persistent, 50):.2f} / {pct(persistent, 99):.2f} ms",
        )
        if failures:
            self.report.notes.append(f"remember: {failures} calls did not answer 201")
        self.log(f"remember: {figures}")

    # -- jobs -------------------------------------------------------------------------------------------
    def _raw_job(self, sentences: int):
        from memory.writes import Actor, remember

        text = self.corpus.note(sentences)
        result = remember(text, actor=Actor("bench-agent", "agent"), agent_id=AGENT)
        return result.job

    def measure_jobs(self) -> None:
        from memory.models import JobStatus
        from pipeline import tasks
        from pipeline.llm.transport import _probe_cache
        from pipeline.writes.jobs import LiveCalls, claim_job
        from pipeline.writes.record import record_job

        fake = FakeModelProcess(delay=0.0)
        saved = (settings.MEMORY_LLM_PROVIDER, settings.OLLAMA_URL)
        settings.MEMORY_LLM_PROVIDER, settings.OLLAMA_URL = "ollama", fake.url
        _probe_cache.clear()
        try:
            warm = self._raw_job(10)
            tasks.run_job(warm.id)  # first model call, first matrix catch-up
            overhead, facts = [], []
            paired = machine_speed.Paired()
            cap = Cap(self.o.phase_seconds, 5)
            server_cpu = fake.cpu_seconds()
            for _ in range(self.o.jobs):
                if cap.reached(len(overhead)):
                    self.capped("job overhead", len(overhead), self.o.jobs)
                    break
                job = self._raw_job(10)
                reference = machine_speed.sample()  # how fast the machine is this moment
                started = time.perf_counter()
                status = tasks.run_job(job.id)
                overhead.append(ms_since(started))
                paired.add(overhead[-1], reference)
                if status != JobStatus.COMPLETED:
                    raise RuntimeError(f"job {job.id} ended {status}")
                job.refresh_from_db()
                facts.append(len(job.result["facts"]))
            server_ms = (fake.cpu_seconds() - server_cpu) * 1000 / max(1, len(overhead))
            holds, commits, records, computes, added = [], [], [], [], 0
            vector_ms, keyword_ms, knn_calls = [], [], 0
            engine_vectors, engine_keyword = engine_modules()
            cap = Cap(self.o.phase_seconds, 5)
            for _ in range(self.o.holds):
                if cap.reached(len(holds)):
                    self.capped("lock hold", len(holds), self.o.holds)
                    break
                job = self._raw_job(10)
                claim = claim_job(job.id)
                # As run_job: the extraction and embedding calls are logged as they return, not in
                # the job's write (the decision calls still are, as in run_job).
                calls = LiveCalls(job.id)
                knn, words, word_spans = [], [], []
                started = time.perf_counter()
                with (
                    timed(engine_vectors, "nearest_owned_many", knn),
                    timed(engine_keyword, "search_many", words, word_spans),
                ):
                    outcome = tasks.compute(claim, calls)
                computes.append(ms_since(started))
                vector_ms.append(sum(knn))
                knn_calls = len(knn)
                keyword_ms.append(wall_ms(word_spans))
                started = time.perf_counter()
                result, held_ms = in_transaction(partial(record_job, outcome), commits)
                records.append(ms_since(started))
                holds.append(held_ms)
                added += result["writeStats"]["added"]
            # One more, counted: how many SQL statements run while the write lock is held.
            job = self._raw_job(10)
            claim = claim_job(job.id)
            calls = LiveCalls(job.id)
            outcome = tasks.compute(claim, calls)
            statements = count_statements(partial(record_job, outcome), in_transaction_only=True)
            http_calls = len([c for c in calls if c.kind in {"extract", "decide", "embed"}])
        finally:
            settings.MEMORY_LLM_PROVIDER, settings.OLLAMA_URL = saved
            _probe_cache.clear()
            fake.stop()
        per_job = round(float(np.median(facts)))
        self.results["job_overhead"] = {
            "p50_ms": pct(overhead, 50),
            "facts_per_job": per_job,
            "model_server_cpu_ms": round(server_ms, 1),
        }
        # The longest hold's COMMIT: on PostgreSQL, how much of the tail is the wait for the disk
        # (one COMMIT per hold: `commits` and `holds` run in step).
        longest = int(np.argmax(holds))
        hold = self.results["lock_hold"] = {
            "p50_ms": pct(holds, 50),
            "p99_ms": pct(holds, 99),
            "holds": len(holds),
            "commit_p50_ms": pct(commits, 50),
            "longest_ms": round(holds[longest], 2),
            "longest_commit_ms": round(commits[longest], 2),
        }
        self.results["job_overhead"]["vector_search_p50_ms"] = pct(vector_ms, 50)
        self.results["job_overhead"]["keyword_leg_p50_ms"] = pct(keyword_ms, 50)
        tag = label(self.size)
        p50 = self.results["job_overhead"]["p50_ms"]
        budget = BUDGETS["job_p50_postgres" if on_postgres() else "job_p50"]
        self.report.add(
            f"job overhead ({per_job} facts, 0-latency model) @ {tag}: p50",
            f"{p50:.1f} ms",
            f"<= {budget:g} ms",
            p50 <= budget,
        )
        self.report.add(
            "  of which compute (model HTTP + 10 candidate searches): p50",
            f"{pct(computes, 50):.1f} ms",
        )
        self.report.add(
            f"  of which the vector search of the job's facts and its hits' owners ({knn_calls} "
            "call(s) a job): p50",
            f"{pct(vector_ms, 50):.1f} ms",
        )
        self.report.add(
            "  of which the keyword leg of the job's facts (wall): p50",
            f"{pct(keyword_ms, 50):.1f} ms",
        )
        self.report.add(
            "  CPU the fake model server spent per job (its JSON and embeddings): mean",
            f"{server_ms:.1f} ms",
        )
        self.report.add("  model HTTP calls per job", str(http_calls))
        self.report.add(
            "  the whole record step (rows prepared before BEGIN): p50",
            f"{pct(records, 50):.1f} ms",
        )
        # Last of the job's rows: how fast the machine was while they were taken.
        scaled = self.results["job_overhead"]["at_quiet_speed_p50_ms"] = paired.at_quiet_speed_p50()
        self.report.add(SCALED_ROW, f"{scaled:.1f} ms")
        self.results["machine_speed"] = report_slowness(self.report, paired.references)
        self.report.add("job write transaction (lock hold): p50", f"{pct(holds, 50):.2f} ms")
        self.report.add(
            "job write transaction (lock hold): p99",
            f"{pct(holds, 99):.2f} ms",
            f"<= {BUDGETS['lock_p99']:g} ms",
            pct(holds, 99) <= BUDGETS["lock_p99"],
        )
        self.report.add(
            f"  of which its COMMIT: p50 (the longest of {len(holds)} holds / its COMMIT)",
            f"{hold['commit_p50_ms']:.2f} ms ({hold['longest_ms']} / {hold['longest_commit_ms']} ms)",
        )
        self.report.add(
            "  SQL statements inside it (10 facts)",
            str(statements),
            f"<= {BUDGETS['statements']}",
            statements <= BUDGETS["statements"],
        )
        self.log(
            f"jobs @ {tag}: overhead p50 {p50:.1f} ms (compute p50 {pct(computes, 50):.1f} ms), "
            f"lock hold p50 {pct(holds, 50):.2f} / p99 {pct(holds, 99):.2f} ms, "
            f"{statements} statements, {added} memories added by {len(holds)} jobs"
        )
        self.measure_job_latency()

    def measure_job_latency(self, delay: float = 0.2, parallel: int = 10) -> None:
        """Wall time of a 10-fact job when every model call takes `delay`: extraction, one
        embedding call, then the decisions side by side (MEMORY_LLM_PARALLEL=`parallel`)."""
        from memory.models import JobStatus
        from pipeline import tasks
        from pipeline.llm.transport import _probe_cache

        fake = FakeModelProcess(delay=delay)
        saved = (settings.MEMORY_LLM_PROVIDER, settings.OLLAMA_URL, settings.MEMORY_LLM_PARALLEL)
        settings.MEMORY_LLM_PROVIDER, settings.OLLAMA_URL = "ollama", fake.url
        settings.MEMORY_LLM_PARALLEL = parallel
        _probe_cache.clear()
        timings, decides = [], 0
        try:
            tasks.run_job(self._raw_job(10).id)  # warm: connections, the model server's pool
            for _ in range(max(3, self.o.jobs // 5)):
                job = self._raw_job(10)
                started = time.perf_counter()
                status = tasks.run_job(job.id)
                timings.append(ms_since(started))
                if status != JobStatus.COMPLETED:
                    raise RuntimeError(f"job {job.id} ended {status}")
                decides = job.llm_calls.filter(kind="decide").count()
        finally:
            settings.MEMORY_LLM_PROVIDER, settings.OLLAMA_URL, settings.MEMORY_LLM_PARALLEL = saved
            _probe_cache.clear()
            fake.stop()
        budget = 3 * delay * 1000 + BUDGETS["latency_slack"]
        p50 = pct(timings, 50)
        self.results["job_latency"] = {
            "p50_ms": p50,
            "model_ms": delay * 1000,
            "parallel": parallel,
            "decisions": decides,
        }
        self.report.add(
            f"job latency, {delay * 1000:.0f} ms model, {decides} decisions "
            f"(MEMORY_LLM_PARALLEL={parallel}): p50",
            f"{p50:.0f} ms",
            f"<= {budget:g} ms",
            p50 <= budget,
        )
        self.log(f"job latency with a {delay * 1000:.0f} ms model: p50 {p50:.0f} ms")

    def measure_eval(self) -> None:
        """The shipped evaluation set through the job's code against the 0-latency fake model,
        one case at a time: wall time per case, less the CPU the fake server spent on it."""
        from pipeline.eval import cases
        from pipeline.eval.report import build_report
        from pipeline.eval.run import run_cases
        from pipeline.llm.ollama import OllamaChat

        fake = FakeModelProcess(delay=0.0)
        try:
            client = OllamaChat(fake.url, settings.MEMORY_EXTRACTION_MODEL, 30.0)
            shipped = cases.load()
            run_cases(client, shipped.cases[:10])  # warm: the connection, the server's pool
            server_cpu = fake.cpu_seconds()
            started = time.perf_counter()
            outcomes = run_cases(client, shipped.cases)
            wall_ms = ms_since(started)
            server_ms = (fake.cpu_seconds() - server_cpu) * 1000
        finally:
            fake.stop()
        report = build_report(shipped, client.provider, client.model, outcomes)
        count = len(outcomes)
        per_case = round((wall_ms - server_ms) / count, 2)
        self.results["eval"] = {
            "cases": count,
            "per_case_ms": per_case,
            "wall_per_case_ms": round(wall_ms / count, 2),
            "model_server_cpu_per_case_ms": round(server_ms / count, 2),
            "accuracy": report["decision"]["accuracy"],
        }
        self.report.add(
            f"eval, shipped set ({count} cases, 0-latency model): per case",
            f"{per_case:.2f} ms",
            f"<= {BUDGETS['eval_case']:g} ms",
            per_case <= BUDGETS["eval_case"],
        )
        self.log(f"eval of the shipped set: {per_case:.2f} ms per case of our own")

    # -- export and import ---------------------------------------------------------------------------
    def _export_process(self, *args: str) -> tuple[float, float, str]:
        """`manage.py export` in a child process, stdout thrown away: (wall seconds, peak RSS in
        MiB, what it said on stderr). The peak is the child's own high-water mark (VmHWM, read
        by the child as it ends): its ru_maxrss would start at this process's RSS, which a fork
        copies (gigabytes here: the benchmark's corpus), and hide the export's own use."""
        started = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, "-c", EXPORT_CHILD, *args],
            cwd=settings.BASE_DIR,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            check=False,
        )
        seconds = time.perf_counter() - started
        if proc.returncode != 0:
            raise RuntimeError(
                f"manage.py export failed ({proc.returncode}): {proc.stderr[-1500:]}"
            )
        peak = re.search(r"VmHWM:\s+(\d+) kB", proc.stderr)
        return seconds, int(peak.group(1)) / 1024, proc.stderr.strip()

    def measure_export(self, size: int) -> None:
        """The whole store through `manage.py export`, as people run it (Django's start included),
        and its peak RSS beside an export of no memory at all: the difference is what the store's
        size costs the command, which stays flat because it streams page by page."""
        _, baseline, _ = self._export_process("--agent", "no-such-agent")
        seconds, peak, said = self._export_process()
        growth = max(0.0, peak - baseline)
        memories = int(re.search(r"Exported (\d+)", said).group(1))
        self.results["export"][str(size)] = {
            "memories": memories,
            "seconds": round(seconds, 2),
            "peak_rss_mib": round(peak, 1),
            "rss_growth_mib": round(growth, 1),
        }
        tag = label(size)
        self.report.add(
            f"export (manage.py export) of {memories:,} memories @ {tag}",
            f"{seconds:.2f} s",
            f"<= {BUDGETS['export_seconds']:g} s",
            seconds <= BUDGETS["export_seconds"],
        )
        self.report.add(
            f"  its peak RSS beyond an export of nothing ({baseline:.0f} MiB) @ {tag}",
            f"{growth:.1f} MiB",
            f"<= {BUDGETS['export_rss_growth_mib']:g} MiB",
            growth <= BUDGETS["export_rss_growth_mib"],
        )
        self.log(f"export @ {tag}: {memories} memories in {seconds:.2f} s, +{growth:.1f} MiB")

    def measure_import(self, count: int) -> None:
        """`manage.py import`'s code on a file of `count` new raw memories (JSON Lines of our
        export's format, no ids), without processing: the wall time, and each batch's write."""
        from memory import imported
        from pipeline.imports import runs

        path = Path(settings.DATA_DIR) / "import.jsonl"
        header = {"format": "memory-curation-export", "version": 1}
        with open(path, "w") as out:
            out.write(json.dumps(header) + "\n")
            for text in self.corpus.held_out(count):
                out.write(json.dumps({"content": text, "agentId": AGENT}) + "\n")
        batches: list[float] = []
        started, cpu = time.perf_counter(), time.process_time()
        with timed(imported, "write_in_transaction", batches):
            run = runs.import_file(path)
        seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
        path.unlink()
        if run.imported != count:
            raise RuntimeError(f"the import took {run.imported} of {count}: {run.report}")
        self.results["import"] = {
            "memories": count,
            "seconds": round(seconds, 2),
            "cpu_seconds": round(cpu, 2),
            "per_s": round(count / seconds),
            "batch_p99_ms": pct(batches, 99),
            "batch_max_ms": round(max(batches), 1),
        }
        self.report.add(
            f"import (manage.py import) of {count:,} raw memories, no processing",
            f"{seconds:.1f} s",
            f"<= {BUDGETS['import_seconds']:g} s",
            seconds <= BUDGETS["import_seconds"],
        )
        self.report.add(
            "  of which CPU time of this process (parsing, rows, SQLite)", f"{cpu:.1f} s"
        )
        self.report.add(
            f"  one batch's write, under the write lock (up to {runs.BATCH_ITEMS}): p99 / max",
            f"{pct(batches, 99):.0f} / {max(batches):.0f} ms",
        )
        self.log(f"import: {count} memories in {seconds:.1f} s ({count / seconds:.0f}/s)")

    # -- many nodes ------------------------------------------------------------------------------------
    def measure_throughput(self) -> None:
        """jobs/s of 3 queue-worker processes (separate qcluster instances, one worker each) on
        this database, with a zero-latency model: what the store sustains, not the model."""
        from django_q.models import OrmQ

        from memory.models import Job, JobStatus

        OrmQ.objects.all().delete()
        Job.objects.filter(status=JobStatus.PENDING).update(status=JobStatus.CANCELLED)
        fake = FakeModelProcess(delay=0.0)
        env = {
            **os.environ,
            "MEMORY_LLM_PROVIDER": "ollama",
            "OLLAMA_URL": fake.url,
            "Q_WORKERS": "1",
            "DJANGO_LOG_LEVEL": "INFO",  # "running." is how a started cluster shows itself
        }
        logs = [Path(settings.DATA_DIR) / f"qcluster-{n}.log" for n in range(3)]
        clusters = []
        try:
            for log_path in logs:
                with open(log_path, "w") as log_file:
                    clusters.append(start_worker(env, log_file))
            deadline = time.monotonic() + 120
            while not all("running." in path.read_text(errors="replace") for path in logs):
                if time.monotonic() > deadline or any(c.poll() is not None for c in clusters):
                    tails = "\n".join(path.read_text(errors="replace")[-1500:] for path in logs)
                    raise RuntimeError(f"a qcluster did not start:\n{tails}")
                time.sleep(0.2)
            started = time.perf_counter()
            job_ids = [self._raw_job(2).id for _ in range(self.o.throughput_jobs)]
            deadline = time.monotonic() + 600
            while Job.objects.filter(id__in=job_ids, status=JobStatus.COMPLETED).count() < len(
                job_ids
            ):
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the workers did not finish the jobs; see {logs}")
                time.sleep(0.1)
            elapsed = time.perf_counter() - started
        finally:
            Job.objects.filter(status=JobStatus.PENDING).update(status=JobStatus.CANCELLED)
            for cluster in clusters:
                stop_cluster(cluster)
            fake.stop()
        jobs_per_s = len(job_ids) / elapsed
        self.results["throughput"] = {"jobs_per_s": round(jobs_per_s, 2), "workers": 3}
        self.report.add(
            "many-node throughput (3 worker processes, 0-latency model)",
            f"{jobs_per_s:.1f} jobs/s",
        )
        self.log(f"throughput: {len(job_ids)} jobs by 3 worker processes in {elapsed:.1f} s")

    # -- remember under load ---------------------------------------------------------------------------
    def measure_load(self) -> None:
        """2 queue workers with a zero-latency model work through a backlog of jobs while remember
        calls arrive every 40 ms: the pipeline's throughput (jobs/s) and remember's p99 under it."""
        from django_q.models import OrmQ

        from memory.models import Job, JobStatus

        # Hand-offs queued by earlier phases were already run in-process: drop them.
        OrmQ.objects.all().delete()
        Job.objects.filter(status=JobStatus.PENDING).update(status=JobStatus.CANCELLED)
        fake = FakeModelProcess(delay=0.0)
        log_path = Path(settings.DATA_DIR) / "qcluster.log"
        env = {
            **os.environ,
            "MEMORY_LLM_PROVIDER": "ollama",
            "OLLAMA_URL": fake.url,
            "Q_WORKERS": "2",
        }
        with open(log_path, "w") as log_file:
            cluster = start_worker(env, log_file)
        try:
            call = self._remember_client()
            started = time.perf_counter()
            first_jobs = [self._raw_job(2).id for _ in range(4)]
            # Steady state: wait until the first jobs are done, so both workers mapped the matrix.
            deadline = time.monotonic() + 120
            while Job.objects.filter(id__in=first_jobs, status=JobStatus.COMPLETED).count() < 4:
                if time.monotonic() > deadline or cluster.poll() is not None:
                    raise RuntimeError(f"the cluster did not complete jobs; see {log_path}")
                time.sleep(0.2)
            warm_s = ms_since(started) / 1000
            # A backlog the workers cannot finish within the window: they are busy all along.
            backlog = [self._raw_job(2).id for _ in range(self.o.load_backlog)]
            done_before = Job.objects.filter(id__in=backlog, status=JobStatus.COMPLETED).count()
            texts = self.corpus.held_out(self.o.load_calls)
            timings, failures = [], 0
            window = time.perf_counter()
            for index, text in enumerate(texts):
                elapsed, status = call(text)
                timings.append(elapsed)
                failures += status != 201
                next_at = window + (index + 1) * self.o.load_interval_ms / 1000
                time.sleep(max(0.0, next_at - time.perf_counter()))
            window_s = time.perf_counter() - window
            done = (
                Job.objects.filter(id__in=backlog, status=JobStatus.COMPLETED).count() - done_before
            )
        finally:
            stopping = time.perf_counter()
            # Tasks the cluster already fetched would otherwise all run before it stops: with their
            # jobs cancelled, each one's claim fails at once and only running jobs finish.
            Job.objects.filter(status=JobStatus.PENDING).update(status=JobStatus.CANCELLED)
            stop_cluster(cluster)
            fake.stop()
            self.log(f"cluster stopped in {ms_since(stopping) / 1000:.1f} s")
        p99 = pct(timings, 99)
        jobs_per_s = done / window_s
        self.results["remember_under_load"] = {"p99_ms": p99}
        self.results["jobs_per_s"] = {
            "jobs_per_s": round(jobs_per_s, 2),
            "workers": 2,
            "backlog_left": len(backlog) - done_before - done,
        }
        tag = label(self.size)
        self.report.add(
            f"jobs_per_s (2 workers, 0-latency model, 2-fact jobs) @ {tag}",
            f"{jobs_per_s:.1f} jobs/s",
        )
        self.report.add(
            "remember under load (those 2 workers busy): p99",
            f"{p99:.2f} ms",
            f"<= {BUDGETS['load_p99']:g} ms",
            p99 <= BUDGETS["load_p99"],
        )
        self.report.add("remember under load: p50", f"{pct(timings, 50):.2f} ms")
        if done_before + done >= len(backlog):
            self.report.notes.append(
                "jobs_per_s: the workers finished the whole backlog inside the window, so the "
                "figure is a lower bound (raise --load-backlog)"
            )
        if failures:
            self.report.notes.append(f"remember under load: {failures} calls did not answer 201")
        self.log(
            f"load: remember p99 {p99:.2f} ms over {len(timings)} calls, {done} backlog jobs "
            f"completed in {window_s:.1f} s ({jobs_per_s:.1f}/s; workers warmed in {warm_s:.1f} s)"
        )

    # -- run ------------------------------------------------------------------------------------------
    def run(self) -> dict:
        whole_run = cpu_steal.Watch()
        self.report.notes.append(
            "Load average (1/5/15 min) at start: " + " ".join(f"{v:.2f}" for v in os.getloadavg())
        )
        if self.o.analyze:
            self.report.notes.append(
                "WHAT-IF RUN (--analyze): ANALYZE ran after each bulk load, so the planner had "
                "sqlite_stat1; the product itself never runs ANALYZE."
            )
        self.setup()
        sizes = sorted(set(self.o.sizes))
        self.corpus.store(sizes[-1])  # the store's sentences first: options never change them
        for size in sizes:
            self.grow_store(size)
            # The harness keeps every sentence and id it generated (a heap no web or queue process
            # has): keep the collector from walking it again and again during the measurements.
            gc.collect()
            gc.freeze()
            self.measure_search(size)
            self.measure_queue(size)
            self.measure_export(size)
        self.measure_purge()
        self.measure_remember()
        job_phases = cpu_steal.Watch()
        self.measure_jobs()
        jobs_share = job_phases.share()
        self.measure_eval()
        if self.o.skip_load:
            self.results["remember_under_load"] = {"p99_ms": None}
            self.results["jobs_per_s"] = {"jobs_per_s": None, "workers": 2, "backlog_left": None}
            self.results["throughput"] = {"jobs_per_s": None, "workers": 3}
            self.report.notes.append("remember_under_load and throughput skipped (--skip-load)")
        else:
            self.measure_throughput()
            self.measure_load()
        # Last: it adds its memories to the store every other phase measured.
        self.measure_import(min(IMPORT_MAX, sizes[-1]))
        self.results["cpu_steal"] = report_steal(
            self.report, {"whole_run": whole_run.share(), "job_phases": jobs_share}
        )
        self.report.notes.append(
            "Load average (1/5/15 min) at end: " + " ".join(f"{v:.2f}" for v in os.getloadavg())
        )
        for size, slowest in getattr(self, "queue_profiles", {}).items():
            self.report.notes.append(f"Slowest queries of the review page @ {label(size)}:")
            for elapsed, sql, plan in slowest:
                self.report.notes.append(f"  {elapsed:7.1f} ms  {sql[:160]}")
                for line in plan:
                    self.report.notes.append(f"             plan: {line}")
        return {
            "engine": "postgresql" if on_postgres() else "sqlite",
            "remember": self.results["remember"],
            "search": self.results["search"],
            "job_overhead": self.results["job_overhead"],
            "lock_hold": self.results["lock_hold"],
            "job_latency": self.results["job_latency"],
            "remember_under_load": self.results["remember_under_load"],
            "jobs_per_s": self.results["jobs_per_s"],
            "throughput": self.results["throughput"],
            "queue_page": self.results["queue_page"],
            "eval": self.results["eval"],
            "export": self.results["export"],
            "import": self.results["import"],
            "purge": self.results["purge"],
            "cpu_steal": self.results["cpu_steal"],
            "machine_speed": self.results["machine_speed"],
        }


WORKERS_DIR = "workers"  # in the run's directory: one file per queue worker still running


def _workers_dir() -> Path | None:
    workdir = os.environ.get("MEMORY_BENCH_DIR")
    return Path(workdir) / WORKERS_DIR if workdir else None


def start_worker(env: dict, log_file, command: list[str] | None = None) -> subprocess.Popen:
    """A queue worker (`manage.py qcluster`) in a session of its own, so a terminal's Ctrl-C
    reaches the benchmark, which stops it in order (stop_cluster). Whatever way the benchmark
    ends, it does not outlive it: it gets SIGTERM when this process dies, and it is recorded in
    the run's directory for `manage.py bench` to reap (reap_workers)."""
    command = command or [sys.executable, "manage.py", "qcluster"]
    worker = subprocess.Popen(
        command,
        cwd=settings.BASE_DIR,
        env=env,
        stdout=log_file,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        # It gets SIGTERM when the benchmark dies, however it dies; off Linux reap_workers does.
        preexec_fn=partial(die_with, os.getpid(), libc_prctl()),
    )
    registry = _workers_dir()
    if registry is not None:
        registry.mkdir(exist_ok=True)
        (registry / str(worker.pid)).write_text("\0".join(command))
    return worker


def stop_cluster(cluster: subprocess.Popen) -> None:
    """SIGTERM to the cluster's main pid (not its group), then wait for it to finish."""
    if cluster.poll() is None:
        cluster.send_signal(signal.SIGTERM)
    try:
        cluster.wait(timeout=60)
    except subprocess.TimeoutExpired:
        cluster.kill()
        cluster.wait()
    registry = _workers_dir()
    if registry is not None:
        (registry / str(cluster.pid)).unlink(missing_ok=True)


def _group_alive(pgid: int) -> bool:
    """Whether a process other than a zombie is left in the process group."""
    proc = Path("/proc")
    if not proc.is_dir():
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return False
        return True
    for stat in proc.glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


def _runs(pid: int, command: str) -> bool:
    """Whether the pid still runs the recorded command (a reused pid is not ours to stop); a
    leader that is gone or a zombie leaves its group to us (/proc shows no command line)."""
    try:
        running = Path(f"/proc/{pid}/cmdline").read_text().rstrip("\0")
    except OSError:
        return True
    return not running or running == command


def reap_workers(workdir: Path, *, timeout: float = 30.0) -> list[int]:
    """Stop the queue workers a benchmark run left behind (its process died before it stopped
    them): SIGTERM, then SIGKILL to each one's process group. Returns their pids."""
    registry = Path(workdir) / WORKERS_DIR
    reaped = []
    for entry in sorted(registry.glob("[0-9]*")) if registry.is_dir() else []:
        pid = int(entry.name)
        if _group_alive(pid) and _runs(pid, entry.read_text()):
            reaped.append(pid)
            try:
                os.kill(pid, signal.SIGTERM)  # the cluster stops its own workers
            except ProcessLookupError:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pid, signal.SIGTERM)  # its workers outlived it
            deadline = time.monotonic() + timeout
            while _group_alive(pid) and time.monotonic() < deadline:
                time.sleep(0.1)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
        entry.unlink(missing_ok=True)
    return reaped


def exhaustive_bm25(texts: list[str], *, k: int) -> list[list[str]]:
    """Each text's BM25 top k over every live memory of the bench's agent, scored in Python with
    the keyword leg's formula and statistics: no index picks the candidates (an inverted index of
    the rows' stems, built here, only skips the rows that hold no query word and score 0)."""
    from memory.keyword import bm25, postgres, sqlite
    from memory.models import Memory

    engine = postgres if on_postgres() else sqlite
    terms = [bm25.query_terms(text) for text in texts]
    with connection.cursor() as cursor:
        stats = engine._STATS.get(cursor) if on_postgres() else sqlite._stats(cursor)
        distinct = sorted({t for ts in terms for t in ts})
        frequencies = engine.document_frequencies(cursor, distinct, stats)
    wanted = {bm25.stem(t) for t in distinct}
    holding: dict[str, list[int]] = {}
    rows = list(
        Memory.objects.filter(agent_id=AGENT, is_deleted=False).values_list("id", "content")
    )
    for row, (_, content) in enumerate(rows):
        for key in {bm25.stem(w) for w in bm25._tokens(content)} & wanted:
            holding.setdefault(key, []).append(row)
    found = []
    for text_terms in terms:
        query = bm25._Query.of(text_terms, frequencies, stats)
        candidates = sorted({row for key in query.weights for row in holding.get(key, [])})
        scores = query.score_many([rows[row][1] for row in candidates])
        scored = sorted(
            (-score, rows[row][0])
            for row, score in zip(candidates, scores, strict=True)
            if score > 0
        )
        found.append([memory_id for _, memory_id in scored[:k]])
    return found


def exact_recall(queries: np.ndarray, found: list[list[int]], model: str, k: int) -> float:
    """Mean share of `found` ids that belong to the exact top-k, by float64 brute force over every
    stored vector of the model. A found id whose exact similarity ties the k-th best (within
    1e-6) counts as correct: either order of equal scores is an exact answer."""
    q = queries.astype(np.float64)
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    best = np.full((q.shape[0], k), -np.inf)
    wanted = {eid for ids in found for eid in ids}
    found_vectors: dict[int, np.ndarray] = {}
    with connection.cursor() as cursor:
        cursor.execute("SELECT id, vector FROM embeddings WHERE model = %s", [model])
        while rows := cursor.fetchmany(20000):
            ids = np.fromiter((row[0] for row in rows), dtype=np.int64, count=len(rows))
            chunk = np.vstack([np.frombuffer(bytes(row[1]), dtype=np.float32) for row in rows])
            chunk = chunk.astype(np.float64)
            norms = np.linalg.norm(chunk, axis=1, keepdims=True)
            chunk /= np.where(norms > 0, norms, 1.0)
            scores = q @ chunk.T
            top = -np.sort(-scores, axis=1)[:, :k] if scores.shape[1] > k else scores
            best = -np.sort(-np.hstack([best, top]), axis=1)[:, :k]
            for eid, row in zip(ids, chunk, strict=True):
                if int(eid) in wanted:
                    found_vectors[int(eid)] = row
    hits = 0
    for i, ids in enumerate(found):
        kth = best[i, -1]
        hits += sum(1 for eid in ids if float(q[i] @ found_vectors[eid]) >= kth - 1e-6)
    return hits / (k * len(found))


@contextlib.contextmanager
def timed(module, name: str, into: list[float], spans: list[tuple[float, float]] | None = None):
    """Inside the block, each call of `module.name` adds its milliseconds to `into` (and, with
    `spans`, its start and end: `wall_ms` of calls made side by side)."""
    original = getattr(module, name)

    def timer(*args, **kwargs):
        started = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            into.append(ms_since(started))
            if spans is not None:
                spans.append((started, time.perf_counter()))

    setattr(module, name, timer)
    try:
        yield into
    finally:
        setattr(module, name, original)


def wall_ms(spans: list[tuple[float, float]]) -> float:
    """From the first call's start to the last one's end: calls that ran side by side count once
    (PostgreSQL's keyword leg runs in two threads)."""
    if not spans:
        return 0.0
    return (max(end for _, end in spans) - min(start for start, _ in spans)) * 1000


def holds_write_lock(sql: str) -> bool:
    """Whether a statement runs inside the write transaction: its BEGIN (SQLite's BEGIN IMMEDIATE
    takes the write lock; PostgreSQL's begins with the block's first statement) or after it."""
    return connection.in_atomic_block or sql.lstrip()[:5].upper() == "BEGIN"


def in_transaction(
    work: Callable[[], object], commits: list[float] | None = None
) -> tuple[object, float]:
    """`work()` and the milliseconds its write transaction was open, from BEGIN to the return of
    the connection's COMMIT (the lock given back). Work done before BEGIN or after COMMIT, such as
    commit hooks, holds no lock and is not counted. With `commits`, the COMMIT's own milliseconds
    are appended to it (on PostgreSQL, mostly the wait for the log to reach the disk)."""
    clock: dict[str, float] = {}

    def timer(execute, sql, params, many, context):
        if "begin" not in clock and holds_write_lock(sql):
            clock["begin"] = time.perf_counter()
        return execute(sql, params, many, context)

    commit = connection._commit
    shadowed = connection.__dict__.get("_commit")

    def timed_commit():
        committing = time.perf_counter()
        try:
            return commit()
        finally:
            clock.setdefault("commit", time.perf_counter())
            if commits is not None:
                commits.append(ms_since(committing))

    started = time.perf_counter()
    connection._commit = timed_commit  # this connection only, for this call
    try:
        with connection.execute_wrapper(timer):
            result = work()
    finally:
        if shadowed is None:
            del connection._commit
        else:
            connection._commit = shadowed
    ended = clock.get("commit", time.perf_counter())
    return result, (ended - clock.get("begin", started)) * 1000


def count_statements(work: Callable[[], object], *, in_transaction_only: bool = False) -> int:
    """SQL statements `work()` runs (an executemany is one); with `in_transaction_only`, only
    those inside its write transaction (BEGIN included), where the write lock is held."""
    count = 0

    def counter(execute, sql, params, many, context):
        nonlocal count
        if not in_transaction_only or holds_write_lock(sql):
            count += 1
        return execute(sql, params, many, context)

    with connection.execute_wrapper(counter):
        work()
    return count


def profile_queries(request: Callable[[], object], top: int = 3) -> list[tuple[float, str, list]]:
    """Time each SQL query of one request; the slowest `top` with their EXPLAIN QUERY PLAN."""
    seen: list[tuple[float, str, tuple]] = []

    def timer(execute, sql, params, many, context):
        started = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            seen.append((ms_since(started), sql, tuple(params or ())))

    with connection.execute_wrapper(timer):
        request()
    slowest = sorted(seen, key=lambda item: -item[0])[:top]
    profiled = []
    with connection.cursor() as cursor:
        for elapsed, sql, params in slowest:
            try:
                cursor.execute(explain_prefix() + sql, params)
                plan = [str(row[-1]) for row in cursor.fetchall()]
            except Exception as exc:  # a plan is a diagnostic, never a failure
                plan = [f"(no plan: {exc})"]
            profiled.append((elapsed, " ".join(sql.split()), plan))
    return profiled
