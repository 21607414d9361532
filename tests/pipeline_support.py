"""Helpers shared by the pipeline tests: modes, a scripted model behind the fake server, seeds.

Model behaviour is steered only through the fake Ollama server (`ScriptedModel` is its
`chat_handler`) or the offline provider; nothing here patches a function.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import re
import shutil
import tempfile
from pathlib import Path
from types import SimpleNamespace

from django.conf import settings
from django.contrib.contenttypes.models import ContentType
from django.core.management import call_command
from django.db import connections

from memory import writes
from memory.models import Job
from memory.writes import Actor
from pipeline.writes.config import update_config

AGENT = Actor("test-agent", "agent")
SEEDER = Actor("seed-script", "agent")

MODES = {
    "shadow": {
        "enabled": True,
        "shadowMode": True,
        "mutationsFrozen": False,
        "allowUpdateDelete": False,
    },
    "controlled-write": {
        "enabled": True,
        "shadowMode": False,
        "mutationsFrozen": False,
        "allowUpdateDelete": False,
    },
    "full": {
        "enabled": True,
        "shadowMode": False,
        "mutationsFrozen": False,
        "allowUpdateDelete": True,
    },
    # The brake on top of full mode: it must still behave like shadow.
    "frozen": {
        "enabled": True,
        "shadowMode": False,
        "mutationsFrozen": True,
        "allowUpdateDelete": True,
    },
    "disabled": {"enabled": False},
}


def set_mode(name: str) -> dict:
    return update_config(MODES[name], changed_by="test", reason=f"test switches to {name}")


def configure(**values) -> dict:
    """update_config with JSON keys; dotted keys are written as `search__alpha`."""
    changes = {key.replace("__", "."): value for key, value in values.items()}
    return update_config(changes, changed_by="test", reason="test setting")


def seed(text: str, **kwargs):
    """An existing memory with no job of its own (a candidate for decisions)."""
    return writes.remember(text, actor=SEEDER, create_job=False, **kwargs).memory


def raw(text: str, **kwargs) -> writes.RememberResult:
    """A raw memory as an agent writes it: committed first, with a pending job."""
    return writes.remember(text, actor=AGENT, **kwargs)


def make_due(job_or_id) -> None:
    """Skip a retry's backoff wait (the clock is the only thing changed)."""
    job_id = getattr(job_or_id, "id", job_or_id)
    Job.objects.filter(id=job_id).update(next_attempt_at=None)


_FACT_IN_PROMPT = re.compile(r'New fact \(type: [^)]*\):\n"(.*)"\n', re.DOTALL)


def fact_in_prompt(prompt: str) -> str:
    match = _FACT_IN_PROMPT.search(prompt)
    assert match, f"not a decision prompt: {prompt[:200]}"
    return match.group(1)


def fact(content: str, confidence: float = 0.9, type: str = "fact") -> dict:
    return {"content": content, "type": type, "confidence": confidence}


def decision(action: str, target=None, confidence: float = 0.9, reason: str | None = None) -> dict:
    target_id = getattr(target, "id", target)
    return {
        "action": action,
        "targetId": target_id,
        "confidence": confidence,
        "reason": reason or f"scripted {action}",
    }


def is_extraction(payload: dict) -> bool:
    schema = payload.get("format") or payload.get("response_format") or {}
    return '"facts"' in json.dumps(schema)


class ScriptedModel:
    """The fake server's chat handler: every extraction returns `facts`; decisions are looked up
    by the fact's text in `decisions` (a dict, or a raw reply string; default: add). Every reply
    is recorded in `replies`."""

    def __init__(self, fake, facts=(), decisions=None, entities=(), on_decide=None):
        self.facts = [fact(f) if isinstance(f, str) else f for f in facts]
        self.entities = list(entities)
        self.decisions = dict(decisions or {})
        self.on_decide = on_decide
        self.replies: list[str] = []
        fake.chat_handler = self

    def __call__(self, payload: dict) -> str:
        prompt = payload["messages"][-1]["content"]
        if is_extraction(payload):
            reply = json.dumps({"facts": self.facts, "entities": self.entities})
        else:
            content = fact_in_prompt(prompt)
            if self.on_decide is not None:
                self.on_decide(content, prompt)
            scripted = self.decisions.get(content) or decision("add", confidence=0.8)
            reply = scripted if isinstance(scripted, str) else json.dumps(scripted)
        self.replies.append(reply)
        return reply


@contextlib.contextmanager
def on_a_file_database(path):
    """Point the default connection at a migrated SQLite file (WAL) for multi-threaded tests.

    pytest-django's in-memory test database uses SQLite's shared cache, whose table locks fail
    at once ("database table is locked") instead of waiting like the real WAL database does.
    The in-memory connection is kept aside (closing it would destroy the test database) and put
    back afterwards. Use with `transactional_db`; worker threads must close their connections.
    On PostgreSQL the test database already is a server that threads and processes share.
    """
    conn = connections["default"]
    if conn.vendor == "postgresql":
        yield
        return
    conn.ensure_connection()
    saved, name = conn.connection, conn.settings_dict["NAME"]
    conn.connection = None
    conn.settings_dict["NAME"] = str(path)
    try:
        _migrated(conn, Path(path))
        yield
    finally:
        conn.close()
        conn.settings_dict["NAME"] = name
        conn.connection = saved


# A migrated store file per test process (and embedding width: a migration reads it), copied for
# each test that wants one: migrating costs 1.7 s, a copy of the file about a millisecond.
_MIGRATED: dict[int, Path] = {}


def _migrated(conn, path: Path) -> None:
    """Make `path` a migrated store, as `migrate` would. `path` must not exist yet (nor its
    `-wal`: a copy over an existing store would leave that log beside it)."""
    template = _MIGRATED.get(settings.MEMORY_EMBEDDING_DIMENSIONS)
    if template is not None and template.exists():
        shutil.copyfile(template, path)
        # migrate empties Django's cache of content types (post_migrate); their ids are the
        # copy's, and erasure looks them up.
        ContentType.objects.clear_cache()
        return
    call_command("migrate", verbosity=0)
    with conn.cursor() as cursor:  # every page in the file itself, none left in its log
        cursor.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        busy, _, _ = cursor.fetchone()
    if busy:  # the log could not be emptied: a copy of the file alone would be missing pages
        return
    folder = Path(tempfile.mkdtemp(prefix="migrated-store-"))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    template = folder / "store.sqlite3"
    # Closed first: the copy opens and closes the file in this process, which drops the POSIX
    # locks SQLite holds on it, and another process closing the store could then reset its log
    # under the open connection (the first file-store test of a process failed with "disk I/O
    # error" in test_erasure_files). The connection opens again at its next query.
    conn.close()
    shutil.copyfile(path, template)
    _MIGRATED[settings.MEMORY_EMBEDDING_DIMENSIONS] = template


# --- one raw memory that yields one ADD, one UPDATE, one DELETE and one NONE --------------------

RAW_TEXT = "Notes from the Tuesday platform sync with the billing team."
ADD_FACT = "Priya prefers squash merges for every repository"
UPDATE_FACT = "The billing service runs on Postgres 16"
DELETE_FACT = "The staging cluster in the eu-west-1 region was shut down"
NONE_FACT = "Kenji owns the billing dashboard"
CONTRADICTING_FACT = "The billing service does not run on Postgres 14"


def seed_store() -> SimpleNamespace:
    """Three memories the scripted decisions point at (enough rows for BM25 to score)."""
    return SimpleNamespace(
        postgres=seed("The billing service runs on Postgres 14"),
        staging=seed("The staging cluster lives in the eu-west-1 region"),
        kenji=seed(NONE_FACT),
    )


def four_decisions(fake, store) -> ScriptedModel:
    return ScriptedModel(
        fake,
        facts=[ADD_FACT, UPDATE_FACT, DELETE_FACT, NONE_FACT],
        entities=[
            {
                "source": "Priya",
                "source_type": "person",
                "relationship": "prefers",
                "target": "squash merges",
                "target_type": "concept",
                "confidence": 0.8,
            }
        ],
        decisions={
            UPDATE_FACT: decision("update", store.postgres, reason="Postgres was upgraded"),
            DELETE_FACT: decision("delete", store.staging, reason="The cluster is gone"),
            NONE_FACT: decision("none", store.kenji, reason="Already stored"),
        },
    )


def pending_delete(target, n: int = 0, *, action: str = "delete"):
    """A proposal to DELETE (or `action`) `target`, waiting for review as a job in shadow mode
    records it, from a raw memory of its own."""
    from django.utils import timezone

    from pipeline.models import Proposal

    source = writes.remember(f"Raw note {n}: {target.content} No longer true.", actor=AGENT)
    now = timezone.now()
    return Proposal.objects.create(
        job=source.job,
        source_memory=source.memory,
        source_version=source.memory.version,
        action=action,
        fact_content=f"Not any more: {target.content}",
        fact_confidence=0.9,
        target_memory=target,
        target_version=target.version,
        target_content=target.content,
        confidence=0.9,
        reason="the source says it no longer holds",
        status="pending",
        model="offline",
        mode="shadow",
        created_at=now,
        updated_at=now,
    )


def approve(client, auth, proposal, **body):
    """POST the JSON API's approval of a proposal as the token `auth` holds."""
    return client.post(
        f"/api/proposals/{proposal.id}/approve",
        json.dumps(body),
        content_type="application/json",
        **auth,
    )


def reject(client, auth, proposal, **body):
    """POST the JSON API's rejection of a proposal as the token `auth` holds."""
    return client.post(
        f"/api/proposals/{proposal.id}/reject",
        json.dumps(body),
        content_type="application/json",
        **auth,
    )
