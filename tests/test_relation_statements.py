"""Which memory stated a relation (relation_statements): written by a remember's triples, added
to by an approved triple and a scrub's merge of two relations, backfilled by migration 0016; a
purge deletes a relation only its memories stated even when other memories mention both of its
entities, and counts down one others state too; an export carries the relations its memories
stated; an import gives its relations to the memories that mention both entities. On whichever
engine the run uses (both in `make test`)."""

from __future__ import annotations

import importlib

import pytest
from django.db import connection

from memory import export, graph
from memory.models import Entity, Memory, MemoryEntityMention, Relation, RelationStatement
from memory.writes import Actor, Triple, forget, remember
from pipeline import purge
from pipeline.purge import Request, Scope
from tests.test_export_import import export_records
from tests.test_export_relations import (
    HEADER,
    memory_line,
    relation_line,
    relations_of,
    run_import,
    write_lines,
)

pytestmark = pytest.mark.django_db(transaction=True)  # a purge commits in parts

WRITER = Actor("agent-one", "agent")
ADMIN = Actor("ada", "operator")


def told(text: str, *triples: tuple[str, str, str]):
    return remember(
        text,
        actor=WRITER,
        create_job=False,
        triples=[Triple(s, kind, t, "person", "service", 0.9) for s, kind, t in triples],
    ).memory


REFUSED_AS_UNSTATED = (
    "line {line}: refused: relation: no memory this import wrote (of those its statedBy names) "
    "mentions both of its entities: a relation comes with the memories that state it, in the "
    "same file, and a memory stored before never takes one it did not state (a purge may have "
    "erased it)"
)


def stated() -> dict[tuple[str, str, str], dict[str, int]]:
    """(source, relation, target) -> {memory id: times} of every relation."""
    found: dict[tuple[str, str, str], dict[str, int]] = {}
    for relation in Relation.objects.select_related("source", "target"):
        key = (relation.source.name, relation.relation_type, relation.target.name)
        found[key] = dict(relation.statements.values_list("memory_id", "mentions"))
    return found


def copied_for(agent: str, tmp_path) -> dict[str, list[str]]:
    """The store exported and imported for `agent`: its relations' words -> the texts of the
    memories stating them."""
    path = tmp_path / "all.jsonl"
    path.write_text("".join(export.lines()))
    run_import(path, "--agent", agent)
    return {
        r.relation_type: sorted(r.statements.values_list("memory__content", flat=True))
        for r in Relation.objects.filter(source__agent_id=agent)
    }


def purge_memory(memory_id: str):
    request = Request(Scope.MEMORY, memory_id=memory_id)
    return purge.purge(request, reason="asked to forget", actor=ADMIN)


def test_each_memory_that_states_a_relation_is_recorded_with_how_often_it_did():
    first = told(
        "Kenji deploys billing-api, twice a week.",
        ("Kenji", "deploys", "billing-api"),
        ("Kenji", "deploys", "billing-api"),
    )
    second = told("Kenji deploys billing-api on Fridays.", ("Kenji", "deploys", "billing-api"))
    assert stated() == {("Kenji", "deploys", "billing-api"): {first.id: 2, second.id: 1}}
    assert Relation.objects.get().mentions == 3


def test_a_purge_deletes_a_relation_only_its_memory_stated_though_others_mention_both_names():
    # The gap a review found: the graph kept "Priya -reports_to-> Omar", which only the purged
    # memory said, because other memories still mention Priya and Omar.
    told("Priya owns the search index.", ("Priya", "owns", "search index"))
    told("Omar runs the search index.", ("Omar", "runs", "search index"))
    told("Priya and Omar pair on Tuesdays.", ("Priya", "pairs with", "Omar"))
    secret = told("Priya reports to Omar since her review.", ("Priya", "reports to", "Omar"))
    assert ("Priya", "reports to", "Omar") in stated()

    receipt = purge_memory(secret.id)

    assert receipt.verified and receipt.status == "done"
    assert ("Priya", "reports to", "Omar") not in stated()
    assert set(stated()) == {
        ("Priya", "owns", "search index"),
        ("Omar", "runs", "search index"),
        ("Priya", "pairs with", "Omar"),
    }
    assert receipt.rows["relations"] == 1 and receipt.rows["relation_statements"] == 1
    assert {"priya", "omar"} <= set(Entity.objects.values_list("canonical_name", flat=True))


def test_the_dry_run_counts_the_relation_the_purge_then_deletes():
    told("Priya pairs with Omar.", ("Priya", "pairs with", "Omar"))
    secret = told("Priya reports to Omar.", ("Priya", "reports to", "Omar"))
    request = Request(Scope.MEMORY, memory_id=secret.id)
    preview = purge.purge(request, reason="r", actor=ADMIN, dry_run=True)
    done = purge.purge(request, reason="r", actor=ADMIN)
    assert preview.rows["relations"] == done.rows["relations"] == 1
    assert preview.rows["relation_statements"] == done.rows["relation_statements"] == 1


def test_a_relation_another_memory_states_too_survives_the_purge_counted_down():
    kept = told("Kenji deploys billing-api.", ("Kenji", "deploys", "billing-api"))
    secret = told(
        "Kenji deploys billing-api, twice.",
        ("Kenji", "deploys", "billing-api"),
        ("Kenji", "deploys", "billing-api"),
    )
    assert Relation.objects.get().mentions == 3

    assert purge_memory(secret.id).verified

    assert stated() == {("Kenji", "deploys", "billing-api"): {kept.id: 1}}
    assert Relation.objects.get().mentions == 1


def test_a_purge_in_parts_deletes_a_relation_its_memories_in_two_parts_stated(monkeypatch):
    """The first part counts it down (a memory of the second still states it), the second
    deletes it; other memories mention both names all along, so no entity takes it away."""
    from pipeline.writes import purge as purge_writes

    monkeypatch.setattr(purge_writes, "WRITE_CHUNK", 2)
    told("Priya owns the search index.", ("Priya", "owns", "search index"))
    told("Omar runs the search index.", ("Omar", "runs", "search index"))
    told("Priya and Omar pair on Tuesdays.", ("Priya", "pairs with", "Omar"))
    for n in range(5):
        told(f"Note {n}: Priya reports to Omar (vault-7731).", ("Priya", "reports to", "Omar"))
    receipt = purge.purge(Request(Scope.TEXT, text="vault-7731"), reason="r", actor=ADMIN)
    assert receipt.verified and len(receipt.memories) == 5
    assert ("Priya", "reports to", "Omar") not in stated()
    assert len(stated()) == 3
    assert receipt.rows["relation_statements"] == 5


def test_an_export_leaves_out_a_relation_only_a_forgotten_memory_stated_though_one_mentions_both():
    told("Priya and the search index: see the runbook.", ("Priya", "documented in", "runbook"))
    told("The search index runbook is Priya's.", ("search index", "runbook of", "Priya"))
    live = told("Priya tunes the search index.", ("Priya", "tunes", "search index"))
    gone = told("Priya owns the search index.", ("Priya", "owns", "search index"))
    forget(gone.id, actor=WRITER, reason="wrong")
    assert MemoryEntityMention.objects.filter(memory=live).count() == 2  # mentions both
    exported = relations_of(export_records())
    assert ("default", "Priya", "tunes", "search index") in exported
    assert ("default", "Priya", "owns", "search index") not in exported
    assert ("default", "Priya", "owns", "search index") in relations_of(
        export_records("--include-deleted")
    )


def test_an_imported_relation_is_stated_by_the_memories_mentioning_both_and_goes_with_them(
    tmp_path,
):
    path = tmp_path / "relations.jsonl"
    write_lines(
        path,
        [
            HEADER,
            memory_line("Kenji deploys billing-api.", "Kenji", "billing-api"),
            memory_line("Kenji is on call.", "Kenji"),
            relation_line(),
        ],
    )
    out, err = run_import(path)
    assert err == "" and "1 imported relation" not in err
    both = MemoryEntityMention.objects.get(entity__canonical_name="billing-api").memory_id
    assert stated() == {("Kenji", "deploys", "billing-api"): {both: 1}}

    run_import(path)  # the same file again: nothing stated twice
    assert stated() == {("Kenji", "deploys", "billing-api"): {both: 1}}

    assert purge_memory(both).verified
    assert not Relation.objects.exists()
    assert list(Entity.objects.values_list("canonical_name", flat=True)) == ["kenji"]


def test_a_relation_line_no_one_memory_mentions_both_ends_of_is_refused(tmp_path):
    path = tmp_path / "relations.jsonl"
    write_lines(
        path,
        [
            HEADER,
            memory_line("Kenji is on call.", "Kenji"),
            memory_line("billing-api is slow today.", "billing-api"),
            relation_line(),
        ],
    )
    out, err = run_import(path)
    assert err.splitlines() == [REFUSED_AS_UNSTATED.format(line=4)]
    assert "2 imported, 0 deduplicated, 1 refused of 3 items." in out
    assert not Relation.objects.exists() and not RelationStatement.objects.exists()


def test_an_export_imported_for_another_agent_gives_back_who_stated_what(tmp_path):
    told("Kenji deploys billing-api.", ("Kenji", "deploys", "billing-api"))
    told("Rita owns the ops runbook.", ("Rita", "owns", "ops runbook"))
    assert copied_for("copy", tmp_path) == {
        "deploys": ["Kenji deploys billing-api."],
        "owns": ["Rita owns the ops runbook."],
    }


def test_two_relations_a_scrub_makes_one_keep_both_memories_statements():
    one = told("Ana mentors Bo.", ("Ana", "mentors", "Bo"))
    two = told("Ana coaches Bo.", ("Ana", "coaches", "Bo"))
    coaches = Relation.objects.get(relation_type="coaches")
    graph.retype_relation(coaches.pk, "mentors")
    assert stated() == {("Ana", "mentors", "Bo"): {one.id: 1, two.id: 1}}


def test_the_migration_backfills_each_relation_from_the_memories_that_mention_both_ends():
    kenji = told("Kenji deploys billing-api.", ("Kenji", "deploys", "billing-api"))
    told("Kenji is on call.", ("Kenji", "is", "on call"))
    gone = told("Kenji wrote billing-api.", ("Kenji", "wrote", "billing-api"))
    purge_memory(gone.id)
    RelationStatement.objects.all().delete()  # the store as it was before 0016
    module = importlib.import_module("memory.migrations.0016_relation_statements")
    with connection.cursor() as cursor:
        cursor.execute(module.BACKFILL)
    assert stated() == {
        ("Kenji", "deploys", "billing-api"): {kenji.id: 1},
        ("Kenji", "is", "on call"): {
            MemoryEntityMention.objects.get(entity__canonical_name="on call").memory_id: 1
        },
    }


def test_the_backfill_gives_a_relation_to_the_memories_holding_its_words_when_some_do():
    says = told("Priya reports to Omar since May.", ("Priya", "reports_to", "Omar"))
    pairs = told("Priya and Omar pair on Tuesdays.", ("Priya", "pairs_with", "Omar"))
    RelationStatement.objects.all().delete()
    module = importlib.import_module("memory.migrations.0016_relation_statements")
    with connection.cursor() as cursor:
        cursor.execute(module.BACKFILL)
    assert stated() == {
        ("Priya", "reports_to", "Omar"): {says.id: 1},  # "reports to" holds its words
        ("Priya", "pairs_with", "Omar"): {says.id: 1, pairs.id: 1},  # none does: both
    }
    assert purge_memory(says.id).verified
    assert set(stated()) == {("Priya", "pairs_with", "Omar")}


def test_the_backfill_reads_relation_words_with_a_backslash_or_a_percent_as_written():
    """A second review: PostgreSQL's LIKE read a word ending in a backslash as a broken escape
    (the migration stopped), and a percent as a wildcard."""
    slash = told("Priya maps C:\\ for Omar.", ("Priya", "maps C:\\", "Omar"))
    other = told("Priya and Omar meet.", ("Priya", "meets", "Omar"))
    told("Priya owns 100% of it with Omar.", ("Priya", "owns 100%", "Omar"))
    RelationStatement.objects.all().delete()
    module = importlib.import_module("memory.migrations.0016_relation_statements")
    with connection.cursor() as cursor:
        cursor.execute(module.BACKFILL)
    found = stated()
    assert found[("Priya", "maps C:\\", "Omar")] == {slash.id: 1}
    assert other.id not in found[("Priya", "owns 100%", "Omar")]


def test_an_old_export_imported_after_a_purge_brings_no_purged_relation_back(tmp_path):
    """A QA pass: the purged relation came back, stated by an innocent memory that mentioned
    the same two names, and no purge by its text could reach it any more."""
    secret = told(
        "Oskar stores the root password hunter-7731 on the Quillback server.",
        ("Oskar", "stores root password hunter-7731 on", "Quillback server"),
    )
    told("Oskar rebooted the Quillback server.", ("Oskar", "rebooted", "Quillback server"))
    path = tmp_path / "old.jsonl"
    path.write_text("".join(export.lines(include_history=True, include_deleted=True)))
    assert purge.purge(Request(Scope.TEXT, text="hunter-7731"), reason="leak", actor=ADMIN).verified
    assert Memory.objects.get(id=secret.id).is_purged

    out, err = run_import(path)

    line = next(
        n
        for n, text in enumerate(path.read_text().splitlines(), 1)
        if "hunter" in text and '"relation"' in text
    )
    assert REFUSED_AS_UNSTATED.format(line=line) in err.splitlines()
    assert set(stated()) == {("Oskar", "rebooted", "Quillback server")}
    assert not Relation.objects.filter(relation_type__contains="hunter").exists()


def test_statedby_gives_an_imported_relation_only_to_the_memories_that_stated_it(tmp_path):
    told("Nina holds passport XK44 issued in Oslo.", ("Nina", "holds passport XK44 in", "Oslo"))
    told("Nina moved to Oslo last year.", ("Nina", "moved to", "Oslo"))
    assert copied_for("copy", tmp_path) == {
        "holds passport XK44 in": ["Nina holds passport XK44 issued in Oslo."],
        "moved to": ["Nina moved to Oslo last year."],
    }
    passport = Relation.objects.get(source__agent_id="copy", relation_type__contains="XK44")
    purge_memory(passport.statements.get().memory_id)  # (the original keeps the same text)
    assert not Relation.objects.filter(source__agent_id="copy", relation_type__contains="XK44")


def test_a_relation_lines_statedby_must_be_a_list_of_memory_ids(tmp_path):
    path = tmp_path / "bad.jsonl"
    write_lines(
        path,
        [
            HEADER,
            memory_line("Kenji deploys billing-api.", "Kenji", "billing-api"),
            relation_line(statedBy="someone"),
            relation_line(statedBy=["not an id!"]),
        ],
    )
    out, err = run_import(path)
    assert err.splitlines() == [
        f"line {n}: refused: statedBy: must be a list of the ids of the file's memories that "
        "stated it"
        for n in (3, 4)
    ]
    assert not Relation.objects.exists()


def test_an_old_export_imported_for_another_agent_brings_no_purged_memory_back(tmp_path):
    """A QA pass: the copies of purged memories, sent to another agent, came back whole, with
    the relation only they stated."""
    secret = told(
        "Walrus holds the vault key qz7-pearl-88311 for the archive.",
        ("Walrus", "holds key qz7-pearl-88311 for", "archive"),
    )
    kept = told("Walrus tidies the archive on Fridays.", ("Walrus", "tidies", "archive"))
    path = tmp_path / "old.jsonl"
    path.write_text("".join(export.lines(include_history=True, include_deleted=True)))
    assert purge_memory(secret.id).verified

    out, err = run_import(path, "--agent", "other")

    lines = path.read_text().splitlines()
    line = next(n for n, text in enumerate(lines, 1) if secret.id in text and '"content"' in text)
    assert (
        f"line {line}: refused: id: memory {secret.id} was purged in this store: a copy of it "
        "for another agent would bring back what the purge erased"
    ) in err.splitlines()
    copies = Memory.objects.filter(agent_id="other")
    assert list(copies.values_list("content", flat=True)) == [kept.content]
    assert not Relation.objects.filter(relation_type__contains="qz7").exists()
    assert not Memory.objects.filter(content__contains="qz7-pearl").exists()


def test_an_old_export_imported_for_another_agent_brings_no_redacted_text_back(tmp_path):
    """A second review: a redaction verified, then the old export imported for another agent
    gave that agent the unredacted text. An edited memory's copy still comes: its old text is
    in its history here."""
    from pipeline import review
    from pipeline.redaction import Request as Redaction

    secret = told("The wifi password is BlueFalcon77 for the guest network.")
    edited = told("The guest network is on floor two.")
    path = tmp_path / "old.jsonl"
    path.write_text("".join(export.lines(include_history=True, include_deleted=True)))
    asked = Redaction(secret.id, "BlueFalcon77", "password")
    assert review.redact(asked, reason="leaked", actor=ADMIN).verified
    from memory.writes import modify

    modify(edited.id, {"content": "The guest network is on floor three."}, actor=ADMIN, reason="r")

    out, err = run_import(path, "--agent", "other")

    assert f"memory {secret.id} here no longer holds a text this line holds" in err
    assert not Memory.objects.filter(content__contains="BlueFalcon77").exists()
    assert list(Memory.objects.filter(agent_id="other").values_list("content", flat=True)) == [
        "The guest network is on floor two."
    ]
