"""Workers of a real `qcluster` dying mid-job: killed with SIGKILL during the model call, dying
inside the write transaction, and a poison job that kills its worker on every attempt.

The cluster is a subprocess, so these tests run on a migrated SQLite *file* (WAL) that both
processes open: the default connection of this process is pointed at it for the test, the cluster
gets it through MEMORY_DB_PATH. Each test is bounded by deadlines and always stops its cluster.

Timings (env of the cluster): Q_TIMEOUT=5, Q_RETRY=6 — django-q2 re-delivers a task whose worker
died after `retry` seconds, but never counts that attempt. The app's own counter does: every claim
counts, and the sweep (here called every few hundred ms instead of every minute) buries a lease
that expired on the last attempt. The lease timeout is set straight in the config row to a few
seconds (the settings form allows 30 s at least, which is right for people and too slow here).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from django.conf import settings
from django_q.models import OrmQ

from memory.models import Job, Memory, MemoryHistory
from pipeline import tasks
from pipeline.models import PipelineConfig, Proposal
from tests.conftest import database_env
from tests.fake_ollama import FakeOllama
from tests.fault_tasks import DIE_IN_EXTRACT, DIE_IN_WRITE_ONCE
from tests.pipeline_support import decision, is_extraction, raw, set_mode

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

BASE_DIR = Path(settings.BASE_DIR)
LEASE_SECONDS = 3
Q_RETRY = 6
FACTS = [
    "Kenji deploys billing-api with Terraform every Friday.",
    "Priya prefers squash merges for every repository.",
    "The payments gateway is written in Go by Ana.",
]
TEXT = " ".join(FACTS)


# --- harness ----------------------------------------------------------------------------------------


def wait_until(predicate, timeout: float, what: str, interval: float = 0.1, each=None):
    """Poll until predicate() is truthy (returns it) or fail after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        if each is not None:
            each()
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


class Cluster:
    """A qcluster subprocess in its own session, logging to a file; stop() always ends it."""

    def __init__(self, log_path: Path, env: dict[str, str], argv: list[str]):
        self.log_path = log_path
        self.log = open(log_path, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            argv,
            cwd=BASE_DIR,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: workers included in stop()
        )

    def text(self) -> str:
        return self.log_path.read_text(errors="replace")

    def running(self) -> bool:
        return "running." in self.text()

    def worker_pid(self, task_name: str) -> int | None:
        """The pid of the worker that logged it is processing `task_name` (None: not yet)."""
        log = self.text()
        pids = dict(re.findall(r"(Process-\w+) ready for work at (\d+)", log))
        found = re.findall(rf"(Process-\w+) processing {re.escape(task_name)} ", log)
        return int(pids[found[-1]]) if found and found[-1] in pids else None

    def stop(self) -> None:
        # SIGTERM to the main pid only (to the whole group it hangs for ~40 s), then SIGKILL
        # whatever of this cluster's own process group is left.
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=3)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            self.proc.wait(timeout=5)
        finally:
            self.log.close()


@pytest.fixture
def file_db(file_db):
    """The shared file database in controlled-write mode, with a lease of a few seconds."""
    set_mode("controlled-write")
    # Below the form's 30 s minimum on purpose (see the module docstring).
    PipelineConfig.objects.filter(pk=1).update(lease_timeout_seconds=LEASE_SECONDS)
    return file_db


def cluster_env(db_path: Path, **extra: str) -> dict[str, str]:
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "DJANGO_SECRET_KEY": settings.SECRET_KEY,  # signs the queued tasks on both sides
        **database_env(),  # the SQLite file at db_path, or the PostgreSQL test database
        "MEMORY_LLM_PROVIDER": "offline",
        "Q_WORKERS": "2",
        "Q_TIMEOUT": "5",
        "Q_RETRY": str(Q_RETRY),
        "Q_POLL": "0.2",
        "PYTHONUNBUFFERED": "1",
        "DJANGO_LOG_LEVEL": "INFO",
    }
    env.pop("MEMORY_TEST_DB_PATH", None)
    env.update(extra)
    return env


@pytest.fixture
def start_cluster(tmp_path):
    started: list[Cluster] = []

    def start(env: dict[str, str], argv: list[str] | None = None) -> Cluster:
        argv = argv or [sys.executable, "manage.py", "qcluster"]
        cluster = Cluster(tmp_path / f"qcluster-{len(started)}.log", env, argv)
        started.append(cluster)
        wait_until(cluster.running, 30, "the cluster to start", interval=0.1)
        return cluster

    yield start
    for cluster in started:
        cluster.stop()


def job_state(job_id: str) -> tuple[str, int]:
    job = Job.objects.get(id=job_id)
    return job.status, job.attempts


def sweep_until(predicate, timeout: float, what: str):
    """Call the sweep like the per-minute schedule would, only far more often."""
    return wait_until(predicate, timeout, what, interval=0.3, each=tasks.sweep)


def derived_contents() -> list[str]:
    return sorted(
        Memory.objects.filter(source_type="pipeline-v2").values_list("content", flat=True)
    )


def assert_written_once(job: Job, source: Memory) -> None:
    assert derived_contents() == sorted(FACTS)  # every fact once, none twice
    proposals = list(Proposal.objects.filter(job=job).order_by("position"))
    assert [(p.action, p.status) for p in proposals] == [("add", "applied")] * 3
    assert MemoryHistory.objects.filter(memory=source, event="none").count() == 3
    assert Proposal.objects.count() == 3
    assert not Job.objects.filter(status__in=["pending", "leased"]).exists()


def queue_drained() -> bool:
    return not OrmQ.objects.exists()


# --- 1. SIGKILL during the model call -----------------------------------------------------------------


class SlowFirstExtraction:
    """The fake server's chat handler: the first extraction hangs until released (the worker is
    killed meanwhile); later ones answer at once with the three facts."""

    def __init__(self):
        self.lock = threading.Lock()
        self.extractions = 0
        self.first_arrived = threading.Event()
        self.release = threading.Event()

    def __call__(self, payload: dict) -> str:
        if not is_extraction(payload):
            return json.dumps(decision("add", confidence=0.8))
        with self.lock:
            self.extractions += 1
            first = self.extractions == 1
        if first:
            self.first_arrived.set()
            self.release.wait(15)
        facts = [{"content": f, "type": "fact", "confidence": 0.9} for f in FACTS]
        return json.dumps({"facts": facts, "entities": []})


def test_a_worker_killed_during_the_model_call_is_retried_and_the_job_completes_once(
    file_db, start_cluster
):
    handler = SlowFirstExtraction()
    server = FakeOllama(settings.MEMORY_EMBEDDING_DIMENSIONS).start()
    server.chat_handler = handler
    try:
        cluster = start_cluster(
            cluster_env(
                file_db,
                MEMORY_LLM_PROVIDER="ollama",
                OLLAMA_URL=server.url,
                MEMORY_LLM_TIMEOUT_SECONDS="20",
                MEMORY_EMBED_TIMEOUT_SECONDS="5",
            )
        )
        result = raw(TEXT)  # committed, then handed to the cluster's queue
        job_id, source = result.job.id, result.memory

        assert handler.first_arrived.wait(20), "the worker never called the model"
        assert job_state(job_id) == ("leased", 1)
        pid = wait_until(lambda: cluster.worker_pid(f"job-{job_id}"), 10, "the worker's pid")
        os.kill(pid, signal.SIGKILL)  # mid-job: the model call is in flight
        handler.release.set()
        wait_until(lambda: "after death" in cluster.text(), 10, "the guard to notice")
        assert job_state(job_id) == ("leased", 1)  # nothing was written by the dead worker
        assert not Proposal.objects.exists() and derived_contents() == []

        # The lease expires; the sweep hands the job off again and a new worker completes it.
        sweep_until(lambda: job_state(job_id)[0] == "completed", 40, "the job to complete")
        job = Job.objects.get(id=job_id)
        assert job.attempts == 2 and job.error is None
        assert handler.extractions == 2  # the killed call and the successful one
        assert_written_once(job, source)
        source.refresh_from_db()
        assert source.extraction_status == "completed" and source.content == TEXT

        # django-q2 re-delivers the killed task after `retry`: it finds the job done, no-op.
        wait_until(queue_drained, Q_RETRY + 15, "the queue to drain")
        assert_written_once(Job.objects.get(id=job_id), source)
        assert Job.objects.get(id=job_id).attempts == 2
        assert cluster.text().count(f"processing job-{job_id} ") >= 2
    finally:
        handler.release.set()
        server.stop()


# --- 2. dying inside the write transaction ----------------------------------------------------------


def test_a_worker_dying_inside_the_write_transaction_leaves_nothing_and_the_retry_writes_once(
    file_db, start_cluster, tmp_path
):
    flag = tmp_path / "died-in-write"
    cluster = start_cluster(
        cluster_env(file_db, **{DIE_IN_WRITE_ONCE: str(flag)}),
        [sys.executable, "-m", "tests.fault_tasks"],
    )
    result = raw(TEXT)
    job_id, source = result.job.id, result.memory

    wait_until(flag.exists, 20, "the worker to die inside the write")
    wait_until(lambda: "after death" in cluster.text(), 10, "the guard to notice")
    # SQLite rolled the open transaction back: not one row of the job's write survived.
    assert job_state(job_id) == ("leased", 1)
    assert not Proposal.objects.exists() and derived_contents() == []
    assert list(MemoryHistory.objects.values_list("memory_id", "event")) == [(source.id, "created")]

    sweep_until(lambda: job_state(job_id)[0] == "completed", 40, "the retry to complete")
    wait_until(queue_drained, Q_RETRY + 15, "the queue to drain")
    job = Job.objects.get(id=job_id)
    assert job.attempts == 2 and job.error is None
    assert_written_once(job, source)


# --- 3. a poison job ------------------------------------------------------------------------------


POISON = "[poison]"


def test_a_job_that_kills_its_worker_every_time_ends_dead_and_shows_in_the_dashboard(
    file_db, start_cluster, viewer_client, client, ingest_auth
):
    max_attempts = PipelineConfig.objects.get(pk=1).max_attempts
    cluster = start_cluster(
        cluster_env(file_db, **{DIE_IN_EXTRACT: POISON}),
        [sys.executable, "-m", "tests.fault_tasks"],
    )
    poison = raw(f"{POISON} Kenji deploys billing-api with Terraform every Friday.")
    healthy = raw("Priya prefers squash merges for every repository.")

    sweep_until(lambda: job_state(poison.job.id)[0] == "dead", 60, "the poison job to die")
    # The cluster kept working for everybody else.
    wait_until(lambda: job_state(healthy.job.id)[0] == "completed", 20, "the healthy job")
    # Every re-delivered task now finds the job dead and leaves the queue: the loop is over.
    wait_until(queue_drained, Q_RETRY + 15, "the queue to drain")

    job = Job.objects.get(id=poison.job.id)
    assert job.attempts == job.max_attempts == max_attempts
    assert job.error.startswith("lease expired") and job.failed_at is not None
    assert cluster.text().count("after death") >= max_attempts
    assert Job.objects.get(id=poison.job.id).status == "dead"  # the drain changed nothing
    memory = Memory.objects.get(id=poison.memory.id)
    assert memory.content == poison.memory.content and not memory.is_deleted
    assert memory.extraction_status == "failed"
    assert not Proposal.objects.filter(job=job).exists()

    # Visible to people: the dashboard's dead filter and the job page, and to agents: the API.
    listing = viewer_client.get("/jobs/", {"status": "dead"})
    assert listing.status_code == 200
    html = listing.content.decode()
    assert job.id in html and healthy.job.id not in html
    page = viewer_client.get(f"/jobs/{job.id}/")
    assert page.status_code == 200 and "lease expired" in page.content.decode()
    assert viewer_client.get("/").status_code == 200
    assert viewer_client.get("/review/").status_code == 200
    api = client.get(f"/api/jobs/{job.id}", **ingest_auth)
    assert api.status_code == 200
    body = api.json()
    assert body["status"] == "dead" and body["attempts"] == max_attempts
    assert body["error"].startswith("lease expired")
