"""Export and import through the commands (issue 22, items 6 and 7): the round trip into an empty
store, a file with bad lines, re-import adding nothing, mem0's two shapes, --process, and the
export command writing as it reads. On whichever engine the run uses (both in `make test`)."""

import io
import json
from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from django_q.models import OrmQ

from memory import export
from memory.erasure import PURGED
from memory.models import (
    Embedding,
    Entity,
    ExtractionStatus,
    Job,
    JobStatus,
    Memory,
    MemoryCold,
    MemoryEntityMention,
    MemoryHistory,
    Relation,
)
from memory.moments import iso
from memory.writes import Actor, Refused, Triple, forget, modify, recover, remember
from pipeline import purge
from pipeline.imports.models import ImportRun
from pipeline.models import LlmCall, Proposal, ReplayStatus, TripleReview
from pipeline.purge import Request, Scope
from pipeline.writes.config import update_config

pytestmark = pytest.mark.django_db

AGENT = Actor("agent-one", "agent")


def export_records(*flags: str) -> list[dict]:
    out = io.StringIO()
    call_command("export", *flags, stdout=out, stderr=io.StringIO())
    return [json.loads(line) for line in out.getvalue().splitlines()]


def run_import(path, *args) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command("import", str(path), *args, stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def write_lines(path, records: list) -> None:
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in records) + "\n")


def empty_the_store() -> None:
    """Every row a memory has, gone: the store is as a fresh install's."""
    for model in (LlmCall, Proposal, TripleReview, Job, MemoryEntityMention, Relation, Entity):
        model.objects.all().delete()
    for model in (Embedding, MemoryCold, MemoryHistory, Memory):
        model.objects.all().delete()
    assert not Memory.objects.exists()


def a_lived_in_store(pipeline_run) -> None:
    """Two agents, entities, tags, a pinned memory, an edit, a forgotten memory, a memory a
    person asserted, one that expires, one expired, a purged one, and memories the pipeline
    derived from a raw one."""
    remember(
        "Kenji deploys billing-api with Terraform on Fridays.",
        actor=AGENT,
        tags=["deploy", "billing"],
        importance=0.9,
        pinned=True,
        triples=[Triple("Kenji", "deploys", "billing-api", "person", "service", 0.9)],
    )
    edited = remember("The ops runbook lives in the wiki.", actor=AGENT, agent_id="ops").memory
    modify(edited.id, {"content": "The ops runbook lives in Notion."}, actor=AGENT, reason="moved")
    gone = remember("Staging is rebuilt nightly.", actor=AGENT, type="procedural").memory
    forget(gone.id, actor=AGENT, reason="no longer true")
    remember("Always ask Priya before a schema change.", actor=AGENT, asserted_by="person")
    remember(
        "The deploy freeze lasts until the end of January.",
        actor=AGENT,
        expires_at=timezone.now() + timedelta(days=40),
    )
    lapsed = remember("The office is closed this week.", actor=AGENT).memory
    modify(lapsed.id, {"expires_at": timezone.now()}, actor=AGENT, reason="reopened")
    leaked = remember("The staging root password is hunter2-prod.", actor=AGENT).memory
    purge.purge(Request(Scope.MEMORY, memory_id=leaked.id), reason="a leaked password", actor=AGENT)
    update_config({"shadowMode": False}, changed_by="t", reason="derive memories")
    pipeline_run("Priya prefers squash merges. Kenji owns the billing-api runbook.")


def without(records: list[dict], *keys: str) -> list[dict]:
    return [{k: v for k, v in r.items() if k not in keys} for r in records]


def test_export_then_import_into_an_empty_store_then_export_gives_the_same_memories(
    tmp_path, pipeline_run
):
    a_lived_in_store(pipeline_run)
    first = export_records("--include-history", "--include-deleted")
    assert first[0]["format"] == export.FORMAT and first[0]["version"] == export.VERSION
    memories = [r for r in first[1:] if "kind" not in r]
    relations = [r for r in first[1:] if r.get("kind") == export.RELATION]
    assert first[1:] == memories + relations  # the relations come after every memory
    assert len(memories) == Memory.objects.count() >= 6
    assert len(relations) == Relation.objects.count() >= 1
    assert any(r["isDeleted"] for r in memories) and any(r["entities"] for r in memories)
    expiries = {r["content"]: r["expiresAt"] for r in memories if r["expiresAt"]}
    assert len(expiries) == 2  # one to come, one already past
    assert any(r["sourceType"] == "pipeline-v2" for r in memories)
    path = tmp_path / "store.jsonl"
    write_lines(path, first)

    empty_the_store()
    out, err = run_import(path)
    assert err == ""
    assert f"{len(first) - 1} imported, 0 deduplicated, 0 refused" in out

    again = export_records("--include-history", "--include-deleted")[1:]
    second = [r for r in again if "kind" not in r]
    # The same relations between the same entities (names, types, counts, times).
    assert [r for r in again if "kind" in r] == relations
    # The same memories: ids, text, fields, times, versions, agents, sources, mentions. Who
    # asserted them is now the import (the original authority is kept in the import's audit).
    assert without(second, "assertedBy", "history") == without(memories, "assertedBy", "history")
    assert {r["assertedBy"] for r in second} == {"import"}
    lapsed = Memory.objects.get(content="The office is closed this week.")
    # A purge's tombstone comes back a tombstone, which recover refuses (it came back as a
    # forgotten memory that recover brought back live as "[purged]": a QA day).
    tombstones = [r for r in memories if r["purgedAt"]]
    assert len(tombstones) == 1 and tombstones[0]["isDeleted"]
    tombstone = Memory.objects.get(id=tombstones[0]["id"])
    assert tombstone.is_purged and tombstone.content == PURGED
    with pytest.raises(Refused, match="purged"):
        recover(tombstone.id, actor=AGENT, reason="oops")
    assert lapsed.is_expired and iso(lapsed.expires_at) == expiries[lapsed.content]
    for before, after in zip(memories, second, strict=True):
        assert after["history"][:-1] == before["history"]  # ids and order kept
        assert after["history"][-1]["event"] == "imported"
        assert after["history"][-1]["metadata"]["assertedBy"] == before["assertedBy"]
    derived = next(r for r in second if r["sourceType"] == "pipeline-v2")
    assert Memory.objects.filter(id=derived["sourceId"]).exists()  # its raw memory came too

    tables = (Memory, MemoryHistory, MemoryEntityMention, Entity, Relation)
    counts = [m.objects.count() for m in tables]
    out, _ = run_import(path)
    assert f"0 imported, {len(first) - 1} deduplicated, 0 refused" in out
    assert [m.objects.count() for m in tables] == counts
    assert [r for r in export_records()[1:] if "kind" in r] == relations  # no count grew


def test_a_file_with_bad_lines_imports_the_good_ones_and_names_each_bad_line_and_field(tmp_path):
    path = tmp_path / "mixed.jsonl"
    write_lines(
        path,
        [
            {"format": export.FORMAT, "version": 1},
            {"content": "Kenji deploys billing-api with Terraform.", "agentId": "ops"},
            {"content": "A memory with a bad importance.", "importance": 7},
            "{not json",
            {"type": "fact"},
            {"content": "Priya prefers squash merges.", "tags": ["git"]},
            {"content": "A bad entity.", "entities": [{"name": ""}]},
        ],
    )
    out, err = run_import(path)
    assert err.splitlines() == [
        "line 3: refused: importance: must be a number between 0 and 1",
        "line 4: refused: line: is not valid JSON: Expecting property name enclosed in double "
        "quotes: line 1 column 2 (char 1)",
        "line 5: refused: content: is required and must be a string",
        "line 7: refused: entities[0].name: is required",
    ]
    assert "2 imported, 0 deduplicated, 4 refused of 6 items." in out
    assert "Imported: lines 2, 6" in out
    assert "  line 5: content: is required and must be a string" in out
    assert sorted(Memory.objects.values_list("content", flat=True)) == [
        "Kenji deploys billing-api with Terraform.",
        "Priya prefers squash merges.",
    ]
    run = ImportRun.objects.get()
    assert (run.status, run.imported, run.refused, run.origin) == ("done", 2, 4, "command")
    assert run.report["refused"][0] == {
        "line": 3,
        "field": "importance",
        "message": "must be a number between 0 and 1",
    }


MEM0_RESULTS = {
    "results": [
        {
            "id": "5c3f1bde-6a4b-4f5e-9a57-0c6d2b3c9a11",
            "memory": "Prefers vegetarian food",
            "hash": "b7f2c1d0",
            "metadata": {"source": "chat"},
            "created_at": "2024-07-20T01:26:51.123456-07:00",
            "updated_at": None,
            "user_id": "alice",
        },
        {"id": "2", "memory": "Is allergic to peanuts", "user_id": "alice"},
    ]
}
MEM0_LIST = [
    {"id": "a1", "memory": "Works at Lumen as an SRE", "agent_id": "helper"},
    {"id": "a2", "memory": "Is allergic to peanuts", "user_id": "alice"},
]


@pytest.mark.parametrize(
    ("document", "expected"),
    [
        (MEM0_RESULTS, {("alice", "Prefers vegetarian food"), ("alice", "Is allergic to peanuts")}),
        (MEM0_LIST, {("helper", "Works at Lumen as an SRE"), ("alice", "Is allergic to peanuts")}),
    ],
    ids=["results-object", "old-plain-list"],
)
def test_mem0_get_all_in_both_shapes_becomes_raw_memories_asserted_by_the_import(
    tmp_path, document, expected
):
    path = tmp_path / "mem0.json"
    path.write_text(json.dumps(document, indent=2))
    out, err = run_import(path)
    assert err == "" and "2 imported" in out and "mem0" in out
    stored = Memory.objects.all()
    assert {(m.agent_id, m.content) for m in stored} == expected
    assert {m.asserted_by for m in stored} == {"import"}
    assert {m.source_type for m in stored} == {"mem0"}
    assert not Job.objects.exists()
    first = Memory.objects.filter(source_id=document_items(document)[0]["id"]).get()
    created = first.history.get()
    assert created.event == "created" and created.metadata["mem0"]["id"] == first.source_id
    if document is MEM0_RESULTS:
        assert first.created_at.isoformat() == "2024-07-20T08:26:51.123456+00:00"


def test_mem0_expiration_date_is_kept_to_the_end_of_that_day_and_a_bad_one_refuses_its_item(
    tmp_path,
):
    """mem0 finds a memory all through its expiration_date (UTC); a value that is no date
    refuses that item alone, naming the field."""
    path = tmp_path / "mem0.json"
    items = [
        {"id": "a", "memory": "The Pro trial runs out.", "expiration_date": "2030-01-31"},
        {"id": "b", "memory": "No expiry here.", "expiration_date": None},
        {"id": "c", "memory": "Wrongly dated.", "expiration_date": "next week"},
        {"id": "d", "memory": "The last day there is.", "expiration_date": "9999-12-31"},
        {"id": "e", "memory": "Far in the future.", "expiration_date": "9500-01-01"},
    ]
    path.write_text(json.dumps({"results": items}, indent=2))
    out, _ = run_import(path)
    assert "2 imported, 0 deduplicated, 3 refused" in out
    assert "expiration_date: too far ahead" in out
    assert "expiration_date: must be a date like 2030-01-31" in out
    expiries = dict(Memory.objects.values_list("source_id", "expires_at"))
    assert expiries["a"].isoformat() == "2030-02-01T00:00:00+00:00"
    assert expiries["b"] is None and not {"c", "d", "e"} & set(expiries)


def test_an_export_line_with_a_bad_expiry_or_a_live_tombstone_is_refused_alone(tmp_path):
    path = tmp_path / "store.jsonl"
    header = export.header(agent=None, include_history=False, include_deleted=False)
    write_lines(
        path,
        [
            header,
            {"content": "Kept.", "agentId": "default", "expiresAt": "2031-05-01T00:00:00Z"},
            {"content": "Refused.", "agentId": "default", "expiresAt": "soon"},
            {"content": "Too far.", "agentId": "default", "expiresAt": "9999-12-31T23:59:59Z"},
            {"content": "[purged]", "agentId": "default", "purgedAt": "2026-01-01T00:00:00Z"},
            {
                "content": "A text no purge could reach again.",
                "agentId": "default",
                "isDeleted": True,
                "purgedAt": "2026-01-01T00:00:00Z",
            },
            # A tombstone carrying a key where a purge leaves none (a QA pass): a writer's
            # reference, and an audit's metadata.
            {
                "content": "[purged]",
                "agentId": "default",
                "isDeleted": True,
                "purgedAt": "2026-01-01T00:00:00Z",
                "sourceType": "api",
                "sourceId": "ref tb8Kk2-mole-9191-SECRETT",
            },
            {
                "content": "[purged]",
                "agentId": "default",
                "isDeleted": True,
                "purgedAt": "2026-01-01T00:00:00Z",
                "history": [
                    {
                        "event": "created",
                        "changedBy": "agent-one",
                        "actorType": "agent",
                        "createdAt": "2025-12-01T00:00:00Z",
                        "metadata": {"fact": {"content": "The mole key is tb8Kk2-mole-9191"}},
                    }
                ],
            },
        ],
    )
    out, _ = run_import(path)
    assert "1 imported, 0 deduplicated, 6 refused" in out
    for line in (6, 7, 8):
        assert f"line {line}: purgedAt: a purged memory holds nothing but its tombstone" in out
    assert not Memory.objects.filter(source_id__contains="tb8Kk2").exists()
    assert "line 3: expiresAt: 'soon' is not an ISO 8601 date and time" in out
    assert "line 4: expiresAt: too far ahead: the latest taken is before 9000-01-01" in out
    assert "line 5: purgedAt: a purged memory is forgotten too: isDeleted must be true" in out
    assert Memory.objects.get().expires_at.isoformat() == "2031-05-01T00:00:00+00:00"


def test_lines_no_column_could_store_are_refused_alone_and_the_lines_around_them_imported(
    tmp_path, django_capture_on_commit_callbacks
):
    """Found by a QA pass: each of these lines failed the whole batch's write (an overflow, a
    CHECK on the JSON, an encoding error), so the valid lines beside it were not imported and
    the command ended in a traceback; the docs say a bad line is refused alone."""
    path = tmp_path / "store.jsonl"
    header = export.header(agent=None, include_history=False, include_deleted=False)
    audit = {"event": "created", "createdAt": "2026-01-01T00:00:00Z"}
    write_lines(
        path,
        [
            header,
            {"content": "First kept.", "agentId": "default"},
            {"content": "Huge version.", "version": 10**30},
            '{"content": "Not a number.", "history": [{"event": "created", '
            '"createdAt": "2026-01-01T00:00:00Z", "metadata": {"score": NaN}}]}',
            '{"content": "lone \\ud800 surrogate"}',
            # In an audit's metadata too: PostgreSQL's json refused the batch (a second review).
            '{"content": "Half a pair.", "history": [{"event": "created", '
            '"createdAt": "2026-01-01T00:00:00Z", "metadata": {"a": "\\udc00"}}]}',
            {"content": "Too early.", "createdAt": "0001-01-01T00:00:00+05:00"},
            {"content": "Too late.", "updatedAt": "9999-12-31T23:59:59-05:00"},
            {
                "content": "Old audit.",
                "history": [{**audit, "createdAt": "0001-01-01T00:00+05:00"}],
            },
            {"content": "Gone already.", "expiresAt": "2001-01-01T00:00:00Z"},
            {"content": "Last kept.", "agentId": "default"},
        ],
    )
    with django_capture_on_commit_callbacks(execute=True):
        out, err = run_import(path, "--process")
    assert "3 imported, 0 deduplicated, 7 refused" in out, (out, err)
    assert "line 3: refused: version: must be a whole number from 1 to 2147483647" in err
    assert "line 4: refused: history[0].metadata: holds NaN or Infinity" in err
    assert "line 5: refused: content: contains an invalid unicode surrogate" in err
    assert "line 6: refused: history[0].metadata: contains an invalid unicode surrogate" in err
    assert (
        "line 7: refused: createdAt: '0001-01-01T00:00:00+05:00' is out of range once in UTC" in err
    )
    assert "line 8: refused: updatedAt:" in err and "line 9: refused: history[0].createdAt:" in err
    stored = dict(Memory.objects.values_list("content", "extraction_status"))
    assert stored == {
        "First kept.": ExtractionStatus.PENDING,
        "Gone already.": ExtractionStatus.NONE,  # expired: no job that could only be cancelled
        "Last kept.": ExtractionStatus.PENDING,
    }
    assert Job.objects.count() == 2


def test_the_import_command_refuses_an_agent_name_longer_than_the_api_takes(tmp_path):
    path = tmp_path / "notes.md"
    path.write_text("- Kenji deploys billing-api.\n")
    with pytest.raises(CommandError, match="--agent must be at most 200 characters"):
        run_import(path, "--agent", "a" * 201)
    assert not Memory.objects.exists()


def document_items(document):
    return document["results"] if isinstance(document, dict) else document


@pytest.mark.parametrize("kind", ["export", "mem0", "markdown"])
def test_importing_a_file_twice_adds_nothing_the_second_time(tmp_path, kind):
    path = tmp_path / "file"
    if kind == "export":
        remember(
            "Kenji deploys billing-api.",
            actor=AGENT,
            triples=[Triple("Kenji", "deploys", "billing-api")],
        )
        write_lines(path, export_records("--include-history"))
        empty_the_store()
    elif kind == "mem0":
        path.write_text(json.dumps(MEM0_RESULTS))
    else:
        path.write_text("# Notes\n\n- Kenji deploys billing-api.\n- Priya reviews it.\n")
    run_import(path)
    tables = (Memory, MemoryHistory, MemoryEntityMention, Entity, Job)
    counts = [model.objects.count() for model in tables]
    out, _ = run_import(path)
    assert "0 imported" in out and "0 refused" in out
    assert [model.objects.count() for model in tables] == counts


def test_an_import_dedupes_against_what_the_store_already_has_and_within_the_file(tmp_path):
    existing = remember("Priya prefers squash merges.", actor=AGENT).memory
    path = tmp_path / "notes.md"
    path.write_text("Priya prefers squash merges\n\n- Kenji deploys.\n- kenji deploys\n")
    out, _ = run_import(path, "-v", "2")
    assert f"line 1: deduplicated, the same memory as {existing.id}" in out
    kenji = Memory.objects.exclude(pk=existing.pk).get()  # in the file twice: not "already stored"
    assert f"line 3: imported as {kenji.id}" in out
    assert f"line 4: deduplicated, the same memory as {kenji.id}" in out
    assert "1 imported, 2 deduplicated, 0 refused of 3 items." in out
    assert Memory.objects.count() == 2


def test_the_same_text_in_another_agent_is_no_duplicate(tmp_path):
    elsewhere = remember(
        "Priya prefers squash merges.", actor=Actor("other-bot", "agent"), agent_id="other-bot"
    ).memory
    path = tmp_path / "notes.md"
    path.write_text("Priya prefers squash merges\n")
    out, _ = run_import(path, "--agent", "support-bot", "-v", "2")
    assert "1 imported, 0 deduplicated, 0 refused of 1 item." in out
    imported = Memory.objects.exclude(id=elsewhere.id).get()
    assert (imported.agent_id, imported.content_hash) == ("support-bot", elsewhere.content_hash)


def test_process_queues_an_extraction_job_per_imported_memory_and_the_default_does_not(
    tmp_path, django_capture_on_commit_callbacks
):
    plain, processed = tmp_path / "plain.md", tmp_path / "processed.md"
    plain.write_text("- Kenji deploys billing-api.\n- Priya reviews it.\n")
    processed.write_text("- Staging is rebuilt nightly.\n- The wiki moved to Notion.\n")
    with django_capture_on_commit_callbacks(execute=True):
        run_import(plain)
    assert not Job.objects.exists()
    # Only their vectors are queued: storage, not a decision.
    assert {q.task["func"] for q in OrmQ.objects.all()} == {"pipeline.memory_ops.embed_stored_many"}
    assert set(Memory.objects.values_list("extraction_status", flat=True)) == {"none"}
    OrmQ.objects.all().delete()

    with django_capture_on_commit_callbacks(execute=True):
        out, _ = run_import(processed, "--process")
    assert "(extraction jobs queued)" in out
    jobs = Job.objects.select_related("memory")
    assert sorted(j.memory.content for j in jobs) == [
        "Staging is rebuilt nightly.",
        "The wiki moved to Notion.",
    ]
    assert {j.status for j in jobs} == {JobStatus.PENDING}
    assert {j.memory.extraction_status for j in jobs} == {ExtractionStatus.PENDING}
    queued = [q.task["args"][0] for q in OrmQ.objects.all()]
    assert sorted(queued) == sorted(j.id for j in jobs)  # handed to the queue after the commit


def test_an_import_without_processing_still_gives_every_new_memory_its_vector(
    tmp_path, drain_queue
):
    already = remember("Priya reviews it.", actor=AGENT).memory
    path = tmp_path / "notes.md"
    path.write_text(
        "- Kenji deploys billing-api.\n- Priya reviews it.\n- The wiki moved to Notion.\n"
    )
    run_import(path)
    new = Memory.objects.exclude(id=already.id)
    assert new.count() == 2 and not new.exclude(embedding_model__isnull=True).exists()
    assert drain_queue() == 1  # one call for the batch, not one a memory
    assert new.filter(embedding_model__isnull=False).count() == 2
    assert Embedding.objects.filter(content_hash__in=new.values("content_hash")).count() == 2
    # The memory that was already stored is deduplicated and not embedded by the import.
    assert Memory.objects.get(id=already.id).embedding_model is None


def test_an_agent_given_to_the_import_takes_every_memory(tmp_path):
    path = tmp_path / "mem0.json"
    path.write_text(json.dumps(MEM0_LIST))
    run_import(path, "--agent", "support-bot")
    assert set(Memory.objects.values_list("agent_id", flat=True)) == {"support-bot"}


def test_a_file_of_a_newer_export_version_is_refused_whole_and_nothing_is_imported(tmp_path):
    path = tmp_path / "new.jsonl"
    write_lines(path, [{"format": export.FORMAT, "version": 99}, {"content": "A memory."}])
    with pytest.raises(CommandError, match="new.jsonl was not imported: line 1: the file is"):
        run_import(path)
    assert not Memory.objects.exists()
    run = ImportRun.objects.get()
    assert run.status == ReplayStatus.FAILED and "version 99" in run.error


def test_the_export_command_writes_each_page_as_it_reads_it(monkeypatch):
    monkeypatch.setattr(export, "PAGE", 2)
    for n in range(5):
        remember(f"Memory number {n} about billing-api.", actor=AGENT)
    written: list[int] = []

    class Recording(io.StringIO):
        def write(self, text):
            written.append(len(queries.captured_queries))
            return super().write(text)

    stdout = Recording()
    with CaptureQueriesContext(connection) as queries:
        call_command("export", stdout=stdout, stderr=io.StringIO())
    lines = stdout.getvalue().splitlines()
    assert len(lines) == 6
    # The first memory's line went out before the last page was read: nothing waits for the
    # whole store, and each page is one query for its memories and one for their mentions.
    assert written[1] < written[-1]
    # Then one query for the relations (there are none), after the last memory's line.
    assert len(queries.captured_queries) == 3 * 2 + 1


def test_the_export_filters_by_agent_and_leaves_forgotten_memories_out_unless_asked():
    remember("Kenji deploys billing-api.", actor=AGENT)
    ops = remember("The ops runbook lives in Notion.", actor=AGENT, agent_id="ops").memory
    gone = remember("Staging is rebuilt nightly.", actor=AGENT, agent_id="ops").memory
    forget(gone.id, actor=AGENT, reason="wrong")
    assert [r["id"] for r in export_records("--agent", "ops")[1:]] == [ops.id]
    both = export_records("--agent", "ops", "--include-deleted")
    assert both[0]["agent"] == "ops" and both[0]["includeDeleted"] is True
    assert sorted(r["id"] for r in both[1:]) == sorted([ops.id, gone.id])
    assert "history" not in both[1]


def test_an_export_imported_to_another_agent_copies_its_memories_and_stays_idempotent(tmp_path):
    """`--agent` sends every memory to that agent: a line of another agent is a copy there (a new
    id; its id stays with the original), deduplicated by its text the next time. It used to be
    taken for its original by the id and import nothing."""
    kept = remember("Kenji deploys billing-api.", actor=AGENT).memory
    gone = remember("The old runbook lives in the wiki.", actor=AGENT).memory
    forget(gone.id, actor=AGENT, reason="moved")
    path = tmp_path / "store.jsonl"
    write_lines(path, export_records("--include-deleted"))
    out, _ = run_import(path, "--agent", "qa-copy")
    assert "2 imported, 0 deduplicated, 0 refused" in out
    copies = {m.content: m for m in Memory.objects.filter(agent_id="qa-copy")}
    assert set(copies) == {kept.content, gone.content}
    assert copies[kept.content].id != kept.id and not copies[kept.content].is_deleted
    assert copies[gone.content].is_deleted
    assert Memory.objects.get(id=kept.id).agent_id == "default"  # the original, untouched
    out, _ = run_import(path, "--agent", "qa-copy")
    assert "0 imported, 2 deduplicated, 0 refused" in out
    assert Memory.objects.filter(agent_id="qa-copy").count() == 2
    # Into the agent the lines name, the id is kept: that memory is already here.
    out, _ = run_import(path, "--agent", "default")
    assert "0 imported, 2 deduplicated, 0 refused" in out


def test_a_line_whose_memory_was_edited_since_the_export_says_the_stored_text_was_kept(
    tmp_path,
):
    """Deduplicated by its id, a line whose memory holds another text now keeps the stored text;
    the report says so, by line (it read as a plain duplicate)."""
    edited = remember("Kenji deploys billing-api.", actor=AGENT).memory
    same = remember("Priya reviews the schema migrations.", actor=AGENT).memory
    path = tmp_path / "store.jsonl"
    write_lines(path, export_records())
    modify(
        edited.id,
        {"content": "Kenji deploys billing-api and ingest-worker."},
        actor=AGENT,
        reason="more",
    )
    out, _ = run_import(path, "-v", "2")
    assert "0 imported, 2 deduplicated, 0 refused" in out
    line = {r["id"]: n for n, r in enumerate(export_records()[1:], start=2)}
    assert (
        f"line {line[edited.id]}: deduplicated, the same memory as {edited.id} (its stored "
        "text differs: the file's was not taken)" in out
    )
    assert f"line {line[same.id]}: deduplicated, the same memory as {same.id}\n" in out
    assert f"Stored text kept: line {line[edited.id]} (" in out
    run = ImportRun.objects.latest("created_at")
    assert run.report["textDiffers"] == [line[edited.id]] and run.report["textDiffersCount"] == 1
    assert Memory.objects.get(id=edited.id).content.endswith("and ingest-worker.")


def test_a_copied_lineage_holds_together_in_the_other_agent(tmp_path, pipeline_run):
    """A derived memory's copy names its raw memory's copy (both ids made from the original and
    the agent), so the copy's lineage, and a purge of it, reach every copied memory."""
    update_config({"shadowMode": False}, changed_by="t", reason="controlled-write")
    (raw_memory,) = pipeline_run(
        "Kenji maintains ingest-worker. Priya owns the billing dashboard. From the wiki."
    )
    derived = list(Memory.objects.filter(source_id=raw_memory.id))
    assert derived
    path = tmp_path / "store.jsonl"
    write_lines(path, export_records())
    run_import(path, "--agent", "qa-copy")
    raw_copy = Memory.objects.get(agent_id="qa-copy", content=raw_memory.content)
    copies = Memory.objects.filter(agent_id="qa-copy", source_id=raw_copy.id)
    assert sorted(copies.values_list("content", flat=True)) == sorted(m.content for m in derived)
    copy_ids = set(copies.values_list("id", flat=True))
    assert not Memory.objects.filter(agent_id="qa-copy", source_id=raw_memory.id).exists()
    # A lineage purge of the copied raw memory reaches its copied facts, and only those.
    receipt = purge.purge(
        Request(Scope.LINEAGE, memory_id=raw_copy.id),
        reason="copy no longer wanted",
        actor=Actor("ada", "operator"),
    )
    # (Not `verified`: the originals in the other agent still hold the same texts.)
    assert set(receipt.memories) == {raw_copy.id, *copy_ids}
    assert all(m.is_purged for m in Memory.objects.filter(agent_id="qa-copy"))
    assert not any(m.is_purged for m in Memory.objects.filter(agent_id="default"))
