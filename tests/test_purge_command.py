"""manage.py purge: the receipt as JSON on stdout; bad input and a failed verification end in a
command error (a script sees the exit status), a dry run writes nothing."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import CommandError, call_command

from memory import writes
from memory.models import Memory
from memory.writes import Actor

WRITER = Actor("agent-one", "agent")


def run(*args) -> dict:
    out = io.StringIO()
    call_command("purge", *args, stdout=out)
    return json.loads(out.getvalue())


def remember(text: str, **kwargs) -> Memory:
    return writes.remember(text, actor=WRITER, create_job=False, **kwargs).memory


@pytest.mark.django_db(transaction=True)
def test_the_command_purges_and_prints_the_receipt():
    memory = remember("The staging DB password is hunter2-prod.")
    receipt = run("--memory", memory.id, "--reason", "leaked password", "--by", "ops")
    assert receipt["verified"] and receipt["memories"] == [memory.id]
    assert Memory.objects.get(id=memory.id).history.get(event="purged").changed_by == "ops"


def test_a_dry_run_writes_nothing(db):
    memory = remember("The staging DB password is hunter2-prod.")
    receipt = run("--text", "hunter2-prod", "--reason", "leaked password", "--dry-run")
    assert receipt["dryRun"] and receipt["memories"] == [memory.id]
    assert not Memory.objects.get(id=memory.id).is_purged


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--agent", "nobody", "--reason", "x"], "unknown_agent"),
        (["--text", "  ", "--reason", "x"], "empty_text"),
        (["--agent", "default", "--reason", " "], "reason_required"),
        (["--agent", "default", "--lineage", "--reason", "x"], "--lineage goes with --memory"),
    ],
)
def test_bad_input_is_a_command_error_and_writes_nothing(db, args, message):
    memory = remember("A note that stays where it is.")
    with pytest.raises(CommandError, match=message):
        run(*args)
    assert not Memory.objects.get(id=memory.id).is_purged


@pytest.mark.django_db(transaction=True)
def test_a_purge_that_cannot_verify_fails_the_command():
    memory = remember("The staging DB password is hunter2-prod.")
    remember("The staging DB password is hunter2-prod.", agent_id="another-agent")
    out = io.StringIO()
    with pytest.raises(CommandError, match="failed its verification"):
        call_command("purge", "--memory", memory.id, "--reason", "leak", stdout=out)
    receipt = json.loads(out.getvalue())
    assert (
        receipt["verified"] is False
        and {"where": "memories.content", "count": 1} in receipt["found"]
    )
