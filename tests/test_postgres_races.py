"""Races only PostgreSQL's concurrent writers can have, staged for real: another connection holds a
write open (uncommitted) while this one acts, and commits once this one waits on its locks.

A forget that commits during a job's write cancels the job (the write locks its source), and an
edit that meets a concurrent remember of the same text answers 409 `duplicate_content_hash`."""

from __future__ import annotations

import json
import threading
import time

import pytest
from django.db import connection, connections, transaction

from memory import writes
from memory.models import Job, Memory
from memory.writes import Actor
from pipeline import tasks
from tests.conftest import TEST_ENGINE
from tests.pipeline_support import ScriptedModel, is_extraction, raw, set_mode

pytestmark = pytest.mark.skipif(
    TEST_ENGINE != "postgres",
    reason="PostgreSQL's concurrent writers (MEMORY_TEST_ENGINE=postgres)",
)
DANA = Actor("dana", "operator")
FACT = "Priya prefers squash merges for every repository"
TAKEN = "The deploy freeze starts on Friday at noon."


class HeldWrite:
    """`work()` run in a transaction of its own thread, left uncommitted until `pid` (this
    test's connection) waits on a lock, then committed. `waited` says whether it ever did."""

    def __init__(self, work):
        self.work = work
        self.holding = threading.Event()
        self.errors: list[BaseException] = []
        self.waited = False
        self.thread = threading.Thread(target=self._run)

    def start(self, pid: int) -> HeldWrite:
        self.pid = pid
        self.thread.start()
        assert self.holding.wait(20), self.errors
        return self

    def _run(self):
        try:
            with transaction.atomic():
                self.work()
                self.holding.set()
                self.waited = _wait_until_blocked(self.pid, timeout=15)
        except BaseException as exc:  # reported by the test
            self.errors.append(exc)
            self.holding.set()
        finally:
            connections.close_all()

    def join(self):
        self.thread.join(30)
        assert not self.thread.is_alive() and not self.errors, self.errors


def _wait_until_blocked(pid: int, *, timeout: float) -> bool:
    """Whether the backend `pid` came to wait on a lock within `timeout` seconds (read from a
    third connection: this thread's own holds the write open)."""
    import psycopg

    settings = connection.settings_dict
    with psycopg.connect(
        host=settings["HOST"],
        port=settings["PORT"] or None,
        user=settings["USER"],
        password=settings["PASSWORD"],
        dbname=connection.settings_dict["NAME"],
        autocommit=True,
    ) as watcher:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            row = watcher.execute(
                "SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", [pid]
            ).fetchone()
            if row and row[0] == "Lock":
                return True
            time.sleep(0.02)
    return False


def backend_pid() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        return cursor.fetchone()[0]


class ForgetWhileTheModelReads:
    """The fake model's chat handler: while the job's extraction call is out (no transaction
    open), a reviewer's forget of the source begins in another connection and stays open."""

    def __init__(self, fake, memory_id: str, pid: int):
        self.model = ScriptedModel(fake, facts=[FACT])
        fake.chat_handler = self
        self.forget = HeldWrite(
            lambda: writes.forget(memory_id, actor=DANA, reason="the notes were wrong")
        )
        self.pid = pid
        self.started = False

    def __call__(self, payload: dict) -> str:
        if is_extraction(payload) and not self.started:
            self.started = True
            self.forget.start(self.pid)
        return self.model(payload)


def test_a_forget_that_commits_during_the_jobs_write_cancels_the_job(file_db, fake_ollama):
    set_mode("controlled-write")
    source = raw("Notes from the platform sync: Priya prefers squash merges everywhere.")
    handler = ForgetWhileTheModelReads(fake_ollama, source.memory.id, backend_pid())
    tasks.process_pending()
    handler.forget.join()
    assert handler.forget.waited, "the job's write never waited for the forget"
    assert Memory.objects.get(id=source.memory.id).is_deleted
    assert not Memory.objects.filter(source_id=source.memory.id, is_deleted=False).exists()
    job = Job.objects.get(id=source.job.id)
    assert job.status == "cancelled" and "forgotten" in job.result["cancelled"]


def _remember_taken():
    writes.remember(TAKEN, actor=Actor("claude-code", "agent"), create_job=False)


def test_an_edit_racing_a_remember_of_the_same_text_answers_409(file_db, client, review_auth):
    memory = writes.remember("The deploy freeze starts on Thursday.", actor=DANA).memory
    held = HeldWrite(_remember_taken).start(backend_pid())
    response = client.patch(
        f"/api/memory/{memory.id}",
        json.dumps({"content": TAKEN, "reason": "fix the day"}),
        content_type="application/json",
        **review_auth,
    )
    held.join()
    assert held.waited, "the edit never met the remember's uncommitted row"
    assert response.status_code == 409, response.content
    body = response.json()
    assert body["error"] == "duplicate_content_hash"
    taken = Memory.objects.get(content=TAKEN, is_deleted=False)
    assert body["duplicateMemoryId"] == taken.id
    memory.refresh_from_db()
    assert memory.version == 1 and memory.content == "The deploy freeze starts on Thursday."
    assert not memory.cold_snapshots.exists()  # the refused edit left no cold copy behind


def test_a_dashboard_edit_racing_a_remember_shows_the_duplicate_next_to_the_text(
    file_db, reviewer_client
):
    memory = writes.remember("The deploy freeze starts on Thursday.", actor=DANA).memory
    held = HeldWrite(_remember_taken).start(backend_pid())
    response = reviewer_client.post(
        f"/memories/{memory.id}/action/",
        {"action": "edit", "content": TAKEN, "reason": "fix the day", "if_version": 1},
    )
    held.join()
    assert held.waited
    assert response.status_code == 400
    assert "Another active memory already has this content" in response.content.decode()
    memory.refresh_from_db()
    assert memory.version == 1


def test_two_purges_of_the_two_memories_stating_a_relation_delete_it(file_db):
    """A second review: each purge saw the other memory's statement (not committed away yet),
    so each only counted the relation down, leaving one nothing states and no purge reaches.
    The purge locks the relations its memories stated before it reads who else states them."""
    from memory.erasure import Texts
    from memory.graph import Triple
    from memory.models import Relation, RelationStatement
    from pipeline.writes import purge as purge_writes

    def stating(text: str) -> Memory:
        triple = Triple("Priya", "reports to", "Omar")
        return writes.remember(text, actor=DANA, create_job=False, triples=[triple]).memory

    first, second = stating("Priya reports to Omar."), stating("Priya reports to Omar, still.")
    writes.remember("Priya and Omar pair on Tuesdays.", actor=DANA, create_job=False)

    def purge(memory: Memory):
        texts = Texts.of([memory.content])
        return purge_writes.purge([memory.id], texts, reason="r", actor=DANA, scope="memory")

    held = HeldWrite(lambda: purge(first)).start(backend_pid())
    purge(second)
    held.join()
    assert not held.errors and held.waited, "the second purge never waited for the first"
    assert not Relation.objects.filter(relation_type="reports to").exists()
    assert not RelationStatement.objects.exists()
