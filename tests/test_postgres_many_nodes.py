"""Many nodes: 2 web processes (gunicorn) and 3 queue workers (separate `qcluster` instances) on one
PostgreSQL and one Redis (Q_BROKER_URL). Several threads send a bounded burst of remember calls
to both web processes; midway one queue node is killed with SIGKILL (its whole process group, as
when a machine dies). Afterwards every acknowledged memory exists once, every job completed once,
no derived memory is duplicated and no lease outlives the lease timeout.

The sweep runs here every half second instead of every minute. A hand-off that the dead node had
taken from Redis but not claimed is lost with it (Redis has no acknowledgement); the product's
sweep re-queues such a job after five quiet minutes, which this test shortens to a few seconds
with the same hand-off call. Everything is bounded by deadlines and every process is stopped.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from datetime import timedelta
from pathlib import Path

import pytest
from django.conf import settings
from django.db.models import Count
from django.utils import timezone

from api.auth import create_token
from devtools.pgserver import free_port
from memory.models import Job, Memory
from memory.queue import hand_off
from pipeline import tasks
from pipeline.models import PipelineConfig, Proposal
from tests.conftest import TEST_ENGINE, database_env
from tests.pipeline_support import set_mode

pytestmark = [
    pytest.mark.slow,
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(
        TEST_ENGINE != "postgres",
        reason="several nodes share a database server: runs in the PostgreSQL pass of make test",
    ),
    pytest.mark.skipif(
        shutil.which("redis-server") is None,
        reason="Debian's redis-server is not installed and could not be (make test installs it)",
    ),
]

BASE_DIR = Path(settings.BASE_DIR)
LEASE_SECONDS = 4
THREADS, PER_THREAD = 4, 12
KILL_AFTER = 16  # acknowledged remembers before the kill
PEOPLE = ["Ana", "Kenji", "Priya", "Omar", "Lena", "Tomas"]
TOOLS = ["Terraform", "Postgres", "Kafka", "Grafana", "Redis", "Vault"]


def text_for(thread: int, n: int) -> str:
    person, tool = PEOPLE[(thread + n) % len(PEOPLE)], TOOLS[(thread * 3 + n) % len(TOOLS)]
    return (
        f"{person} maintains the {tool} setup of service {thread}-{n}. "
        f"The {tool} dashboards of team {n % 3} are reviewed every Monday."
    )


class Node:
    """A child process in its own session, logging to a file; stop() always ends it."""

    def __init__(self, argv: list[str], env: dict[str, str], log_path: Path):
        self.log_path = log_path
        self.log = open(log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            argv,
            cwd=BASE_DIR,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def text(self) -> str:
        return self.log_path.read_text(errors="replace")

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)  # the main pid only: a group SIGTERM hangs q2
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        self.kill()
        try:
            self.proc.wait(timeout=5)
        finally:
            self.log.close()


def wait_until(predicate, timeout: float, what: str, each=None, interval: float = 0.2):
    deadline = time.monotonic() + timeout
    while True:
        if each is not None:
            each()
        if value := predicate():
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


@pytest.fixture
def nodes(tmp_path):
    started: list[Node] = []

    def start(name: str, argv: list[str], env: dict[str, str]) -> Node:
        node = Node(argv, env, tmp_path / f"{name}.log")
        started.append(node)
        return node

    yield start
    for node in reversed(started):
        node.stop()


@pytest.fixture
def redis_url(nodes):
    import redis

    port = free_port()
    argv = ["redis-server", "--port", str(port), "--bind", "127.0.0.1"]
    nodes("redis", [*argv, "--save", "", "--appendonly", "no"], dict(os.environ))
    url = f"redis://127.0.0.1:{port}/0"
    wait_until(lambda: _pings(redis.Redis.from_url(url)), 15, "redis-server to answer")
    return url


def _pings(client) -> bool:
    try:
        return bool(client.ping())
    except Exception:
        return False


def _http(url: str, body: dict, token: str) -> tuple[int, dict]:
    import httpx

    response = httpx.post(url, json=body, headers={"Authorization": f"Bearer {token}"}, timeout=30)
    return response.status_code, response.json()


def test_two_web_and_three_queue_nodes_survive_a_killed_worker(nodes, redis_url, monkeypatch):
    from django_q.conf import Conf

    set_mode("controlled-write")
    PipelineConfig.objects.filter(pk=1).update(lease_timeout_seconds=LEASE_SECONDS)
    _, token = create_token("burst", scopes=["ingest"])
    env = {
        **os.environ,
        **database_env(),
        "Q_BROKER_URL": redis_url,
        "DJANGO_SECRET_KEY": settings.SECRET_KEY,  # signs the queued tasks on every node
        "MEMORY_LLM_PROVIDER": "offline",
        "DJANGO_ALLOWED_HOSTS": "127.0.0.1",
        "Q_WORKERS": "1",
        "Q_TIMEOUT": "20",
        "Q_RETRY": "30",
        "PYTHONUNBUFFERED": "1",
    }
    webs = []
    for n in range(2):
        port = free_port()
        gunicorn = str(Path(sys.executable).parent / "gunicorn")
        argv = [gunicorn, "config.wsgi", "--bind", f"127.0.0.1:{port}", "--workers", "1"]
        nodes(f"web-{n}", argv, env)
        webs.append(f"http://127.0.0.1:{port}/api/memory/remember")
    clusters = [
        nodes(f"qcluster-{n}", [sys.executable, "manage.py", "qcluster"], env) for n in range(3)
    ]
    for cluster in clusters:
        wait_until(lambda c=cluster: "running." in c.text(), 60, "a qcluster to start")
    # This process's hand-offs (the sweep's) go to the same Redis list as the nodes'.
    monkeypatch.setattr(Conf, "ORM", None)
    monkeypatch.setattr(Conf, "REDIS", redis_url)

    acknowledged: list[dict] = []
    errors: list[str] = []
    lock = threading.Lock()
    killed = threading.Event()

    def burst(thread: int) -> None:
        for n in range(PER_THREAD):
            body = {"content": text_for(thread, n)}
            try:
                status, answer = _http(webs[(thread + n) % 2], body, token)
            except Exception as exc:  # a web node that did not answer: not acknowledged
                errors.append(f"{thread}-{n}: {exc!r}")
                continue
            if status in (200, 201):
                with lock:
                    acknowledged.append(answer)
                    if len(acknowledged) == KILL_AFTER and not killed.is_set():
                        killed.set()
                        clusters[1].kill()
            else:
                errors.append(f"{thread}-{n}: {status} {answer}")

    wait_until(lambda: all(_answers(url) for url in webs), 60, "both web nodes to answer")
    threads = [threading.Thread(target=burst, args=(t,)) for t in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=180)
    assert not any(thread.is_alive() for thread in threads)
    assert errors == [] and killed.is_set()
    assert len(acknowledged) == THREADS * PER_THREAD

    memory_ids = [answer["id"] for answer in acknowledged]
    job_ids = [answer["jobId"] for answer in acknowledged if answer["jobId"]]

    def sweep() -> None:
        tasks.sweep()
        # A hand-off lost with the dead node: re-queued after 3 quiet seconds, not 5 minutes.
        quiet = timezone.now() - timedelta(seconds=3)
        for job_id in Job.objects.filter(status="pending", updated_at__lt=quiet).values_list(
            "id", flat=True
        ):
            Job.objects.filter(id=job_id).update(updated_at=timezone.now())
            hand_off(job_id)

    def all_done() -> bool:
        return not Job.objects.filter(id__in=job_ids).exclude(status="completed").exists()

    wait_until(all_done, 150, "every job to complete", each=sweep, interval=0.5)

    # Every acknowledged memory exists, once.
    assert len(set(memory_ids)) == len(memory_ids)
    stored = Memory.objects.filter(id__in=memory_ids)
    assert stored.count() == len(memory_ids)
    duplicated = (
        Memory.objects.filter(is_deleted=False)
        .values("agent_id", "content_hash")
        .annotate(n=Count("id"))
        .filter(n__gt=1)
    )
    assert list(duplicated) == []
    # Every job completed once: one job per raw memory, one proposal per extracted fact.
    assert len(job_ids) == len(memory_ids)
    assert Counter(Job.objects.filter(id__in=job_ids).values_list("status", flat=True)) == {
        "completed": len(job_ids)
    }
    assert not Job.objects.filter(memory_id__in=memory_ids).exclude(id__in=job_ids).exists()
    twice = Proposal.objects.values("job_id", "position").annotate(n=Count("id")).filter(n__gt=1)
    assert list(twice) == []
    # No derived memory is duplicated, and each one was created once.
    derived = Memory.objects.filter(source_type="pipeline-v2")
    assert derived.exists()
    per_fact = derived.values("source_id", "content_hash").annotate(n=Count("id"))
    assert all(row["n"] == 1 for row in per_fact)
    for memory in derived:
        assert memory.history.filter(event="created").count() == 1
    # Nothing stays leased past the lease timeout.
    assert not Job.objects.filter(status="leased").exists()
    log = clusters[0].text() + clusters[2].text()
    assert "Traceback" not in log, log[max(0, log.find("Traceback") - 300) :][:4000]
    print(
        json.dumps(
            {
                "acknowledged": len(acknowledged),
                "derived": derived.count(),
                "reclaimedOrRetried": Job.objects.filter(id__in=job_ids, attempts__gt=1).count(),
            }
        )
    )


def _answers(url: str) -> bool:
    import httpx

    try:
        return httpx.get(url.replace("/memory/remember", "/health"), timeout=2).status_code == 200
    except Exception:
        return False
