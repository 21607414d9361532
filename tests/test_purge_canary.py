"""The canary test of issue 22, on both engines: a memory holding a unique token goes through the
pipeline and every reviewer action that copies its text (extraction and derived memories, an
entity triple, an edit, an approved UPDATE of it, a second opinion, forget and recover), then is
purged with its lineage through the API. Afterwards no table holds the token, and on SQLite no
byte of the database file, its log or any file beside it (the vector matrix) does; recall and the
dashboard's search find nothing; the tombstone and its receipt exist."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from django.db import connection

from memory import writes
from memory.erasure import PURGED, PURGED_EVENT
from memory.models import Memory, MemoryHistory
from memory.writes import Actor
from pipeline import replay, review
from pipeline.models import Proposal, ProposalStatus, TripleReview
from pipeline.tasks import process_pending
from tests.pipeline_support import ScriptedModel, decision, fact, raw, set_mode

TOKEN = "zqcanary7f3a9e"  # one word to the full-text index, in no other text of the store
REVIEWER = Actor("rita", "operator")
KEPT = "The tea kettle in the Berlin office is broken again."  # a memory the purge must not touch


def every_value_holding(token: str) -> list[tuple[str, str]]:
    """(table, column) of every value of every table of the database that holds the token."""
    found = []
    quote = connection.ops.quote_name
    with connection.cursor() as cursor:
        for table in connection.introspection.table_names(cursor):
            if table.startswith("memories_fts") or table.startswith("vec_embeddings"):
                continue  # virtual tables: checked through their owners and as bytes below
            columns = [
                c.name for c in connection.introspection.get_table_description(cursor, table)
            ]
            cursor.execute(f"SELECT * FROM {quote(table)}")
            for row in cursor.fetchall():
                for column, value in zip(columns, row, strict=True):
                    text = (
                        bytes(value).decode("latin-1")
                        if isinstance(value, bytes | memoryview)
                        else str(value)
                    )
                    if token in text.lower():
                        found.append((table, column))
    return found


def files_holding(folder: Path, token: str) -> list[str]:
    return [
        path.name
        for path in folder.rglob("*")
        if path.is_file() and token.encode() in path.read_bytes()
    ]


def canary_story(fake) -> Memory:
    """The canary's life before its purge; returns the raw memory."""
    set_mode("controlled-write")
    writes.remember(KEPT, actor=Actor("seed", "agent"), create_job=False)
    ScriptedModel(
        fake,
        facts=[
            fact(f"Priya keeps the vault code {TOKEN}"),
            fact("The vault sits in the Berlin safe"),
        ],
        entities=[
            {
                "source": "Priya",
                "relationship": "keeps",
                "target": f"vault code {TOKEN}",
                "source_type": "person",
                "target_type": "concept",
                "confidence": 0.9,
            }
        ],
    )
    canary = raw(f"The vault code is {TOKEN} and Priya keeps it in the Berlin safe.").memory
    process_pending()
    derived = Memory.objects.filter(source_id=canary.id)
    assert any(TOKEN in m.content for m in derived), "the job derived a memory holding the token"
    triple = TripleReview.objects.get(source_memory=canary)
    review.decide_triple(triple.id, REVIEWER, approve=True)  # entities and mentions with the token
    writes.modify(
        canary.id,
        {"content": f"The vault code is {TOKEN}; Priya keeps it in the safe in Berlin."},
        actor=REVIEWER,
        reason="clearer",
    )
    # Another raw memory's fact updates the canary; a reviewer approves it.
    update = "The vault code now sits in the Hamburg safe"
    ScriptedModel(fake, facts=[fact(update)], decisions={update: decision("update", canary)})
    raw("Ops note: we moved the safe with the vault papers to Hamburg last week.")
    process_pending()
    pending = Proposal.objects.get(target_memory=canary, status=ProposalStatus.PENDING)
    review.approve(pending.id, REVIEWER)
    # A second opinion over the canary's proposals, with the extraction asked again.
    run = replay.ask_second_opinion(
        Proposal.objects.filter(source_memory=canary),
        requested_by="rita",
        provider="offline",
        model="offline-heuristic",
        with_extraction=True,
    )
    replay.run_replay(run.id)
    writes.forget(canary.id, actor=REVIEWER, reason="testing forget")
    writes.recover(canary.id, actor=REVIEWER, reason="testing recover")
    assert every_value_holding(TOKEN), "the story spread the token around"
    return canary


def test_a_purged_canary_leaves_no_copy_anywhere(
    file_db, fake_ollama, client, multi_admin, admin_client_role
):
    canary = canary_story(fake_ollama)
    response = client.post(
        f"/api/memory/{canary.id}/purge",
        {"reason": "issue 22 canary", "lineage": True},
        content_type="application/json",
        **multi_admin,
    )
    assert response.status_code == 200, response.content
    receipt = response.json()
    print(json.dumps(receipt, indent=2))  # the closing note of issue 22 shows one
    assert set(receipt) == {
        "dryRun",
        "memories",
        "rows",
        "verified",
        "found",
        "repaired",
        "outOfReach",
        "tombstone",
        "derivedKept",
    }
    assert receipt["verified"] is True and receipt["found"] == [] and not receipt["dryRun"]
    assert receipt["derivedKept"] == []  # the lineage went with it
    assert canary.id in receipt["memories"] and len(receipt["memories"]) >= 3  # raw + derived
    assert receipt["rows"]["memories"] == len(receipt["memories"])

    assert every_value_holding(TOKEN) == []
    if connection.vendor == "sqlite":
        assert files_holding(Path(file_db).parent, TOKEN) == []
    kept = Memory.objects.get(content=KEPT)
    assert not kept.is_deleted and kept.purged_at is None

    tombstone = MemoryHistory.objects.get(id=receipt["tombstone"])
    assert (tombstone.memory_id, tombstone.event, tombstone.changed_by) == (
        canary.id,
        PURGED_EVENT,
        "ops-admin",
    )
    assert tombstone.reason == "issue 22 canary"
    assert tombstone.metadata["receipt"]["verified"] is True
    assert tombstone.metadata["receipt"]["rows"] == receipt["rows"]
    purged = Memory.objects.get(id=canary.id)
    assert (purged.content, purged.is_purged, purged.is_deleted) == (PURGED, True, True)

    recall = client.post(
        "/api/memory/recall", {"query": TOKEN}, content_type="application/json", **multi_admin
    )
    assert recall.status_code == 200 and recall.json()["results"] == []
    page = admin_client_role.get("/memories/", {"q": TOKEN, "deleted": "all"})
    assert page.status_code == 200 and list(page.context["page"].object_list) == []
    assert f"Nothing matches “{TOKEN}”" in page.content.decode()
    shown = admin_client_role.get(f"/purge/receipts/{receipt['tombstone']}/")
    assert shown.status_code == 200 and "Done." in shown.content.decode()


@pytest.mark.sqlite_only(reason="the one-time VACUUM of a store older than secure_delete")
def test_a_store_older_than_secure_delete_is_vacuumed_once(file_db, multi_admin, client):
    """A store whose freed pages may predate secure_delete is not marked: its first purge
    merges its full-text index (entries deleted before FTS5's secure-delete wait behind delete
    markers for a merge) and vacuums it (no byte of earlier versions in any free page); later
    ones do neither."""
    memory = writes.remember(f"Old store note {TOKEN} before the upgrade.", actor=REVIEWER).memory
    writes.modify(memory.id, {"content": "Old store note, reworded."}, actor=REVIEWER, reason="r")
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA user_version = 0")
    first = client.post(
        f"/api/memory/{memory.id}/purge",
        {"reason": "old store"},
        content_type="application/json",
        **multi_admin,
    ).json()
    assert first["verified"] and files_holding(Path(file_db).parent, TOKEN) == []
    with connection.cursor() as cursor:  # the full-text index was merged (its marker logged)
        cursor.execute("SELECT COUNT(*) FROM memories_fts_changes WHERE row = 0 AND deleted = 1")
        assert cursor.fetchone()[0] == 1
    tombstone = MemoryHistory.objects.get(id=first["tombstone"])
    assert any("vacuumed once" in check for check in tombstone.metadata["receipt"]["checks"])
    other = writes.remember("A second note to purge later on.", actor=REVIEWER).memory
    second = client.post(
        f"/api/memory/{other.id}/purge",
        {"reason": "again"},
        content_type="application/json",
        **multi_admin,
    ).json()
    checks = MemoryHistory.objects.get(id=second["tombstone"]).metadata["receipt"]["checks"]
    assert second["verified"] and not any("vacuumed once" in check for check in checks)
    with connection.cursor() as cursor:
        cursor.execute("SELECT COUNT(*) FROM memories_fts_changes WHERE row = 0 AND deleted = 1")
        assert cursor.fetchone()[0] == 1
