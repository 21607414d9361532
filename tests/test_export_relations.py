"""Relations between entities in the export and back through the import: which relations an
export carries (its agent's, between entities its memories mention), paged; the import writing
them once (idempotent), for the agent it sends lines to, refusing a bad relation line by its
field. On whichever engine the run uses (both in `make test`)."""

import io
import json

import pytest
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext

from api.auth import create_token
from memory import export
from memory.models import Entity, Relation
from memory.writes import Actor, Triple, forget, remember
from tests.test_export_import import export_records

pytestmark = pytest.mark.django_db

AGENT = Actor("agent-one", "agent")


def relations_of(records: list[dict]) -> list[tuple[str, str, str, str]]:
    return [
        (r["agentId"], r["source"], r["relation"], r["target"])
        for r in records
        if r.get("kind") == export.RELATION
    ]


def run_import(path, *args) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    call_command("import", str(path), *args, "-v", "2", stdout=out, stderr=err)
    return out.getvalue(), err.getvalue()


def write_lines(path, records: list) -> None:
    path.write_text("\n".join(json.dumps(r) for r in records) + "\n")


def told(text: str, source: str, kind: str, target: str, agent: str = "default"):
    return remember(
        text,
        actor=AGENT,
        agent_id=agent,
        triples=[Triple(source, kind, target, "person", "service", 0.9)],
    ).memory


HEADER = {"format": export.FORMAT, "version": export.VERSION}


def relation_line(**fields) -> dict:
    return {
        "kind": "relation",
        "agentId": "default",
        "source": "Kenji",
        "sourceType": "person",
        "target": "billing-api",
        "targetType": "service",
        "relation": "deploys",
        "confidence": 0.9,
        "mentions": 2,
        **fields,
    }


def test_an_export_ends_with_the_relations_of_its_agents_entities_with_names_types_and_counts():
    told("Kenji deploys billing-api on Fridays.", "Kenji", "deploys", "billing-api")
    told("Kenji deploys billing-api with Terraform.", "Kenji", "deploys", "billing-api")
    told("Rita owns the ops runbook.", "Rita", "owns", "ops runbook", agent="ops")
    records = export_records()
    kenji = next(r for r in records if r.get("kind") == export.RELATION and r["source"] == "Kenji")
    assert kenji["sourceType"] == "person" and kenji["targetType"] == "service"
    assert kenji["mentions"] == 2 and kenji["confidence"] == pytest.approx(0.9)
    assert kenji["createdAt"].endswith("Z") and kenji["updatedAt"].endswith("Z")
    assert relations_of(records) == [
        ("default", "Kenji", "deploys", "billing-api"),
        ("ops", "Rita", "owns", "ops runbook"),
    ]
    assert all("kind" not in r for r in records[1:4])  # the three memories first
    assert relations_of(export_records("--agent", "ops")) == [
        ("ops", "Rita", "owns", "ops runbook")
    ]


def test_a_relation_only_forgotten_memories_name_comes_only_with_forgotten_memories():
    told("Kenji deploys billing-api.", "Kenji", "deploys", "billing-api")
    gone = told("Priya owns the search index.", "Priya", "owns", "search index")
    forget(gone.id, actor=AGENT, reason="she moved teams")
    assert relations_of(export_records()) == [("default", "Kenji", "deploys", "billing-api")]
    assert relations_of(export_records("--include-deleted")) == [
        ("default", "Kenji", "deploys", "billing-api"),
        ("default", "Priya", "owns", "search index"),
    ]


def test_relations_are_read_a_page_at_a_time_each_page_two_queries(monkeypatch):
    monkeypatch.setattr(export, "PAGE", 2)
    for n in range(5):
        told(f"Person{n} runs service number {n}.", f"Person{n}", "runs", f"service{n}")
    with CaptureQueriesContext(connection) as queries:
        records = list(export.relation_records())
    assert [r["source"] for r in records] == [f"Person{n}" for n in range(5)]
    assert len(queries.captured_queries) == 6  # the relations, and the memories stating them


def test_an_admin_tokens_api_export_carries_the_relations_of_its_own_agent_only(client):
    told("Kenji deploys billing-api.", "Kenji", "deploys", "billing-api")
    told("Rita owns the ops runbook.", "Rita", "owns", "ops runbook", agent="ops")
    _, plain = create_token("ops-admin", agent_id="ops", scopes=["admin"])
    response = client.get("/api/export", HTTP_AUTHORIZATION=f"Bearer {plain}")
    records = [json.loads(line) for line in b"".join(response.streaming_content).splitlines()]
    assert relations_of(records) == [("ops", "Rita", "owns", "ops runbook")]


def memory_line(text: str, *names: str, agent: str = "default") -> dict:
    """A memory line of our export mentioning these entities (as people's names)."""
    return {
        "content": text,
        "agentId": agent,
        "entities": [{"name": n, "type": "person", "mention": n, "confidence": 0.9} for n in names],
    }


def test_importing_relations_twice_writes_them_once_and_keeps_a_stored_relations_counts(tmp_path):
    told("Kenji deploys billing-api.", "Kenji", "deploys", "billing-api")
    Relation.objects.update(mentions=5)
    path = tmp_path / "relations.jsonl"
    write_lines(
        path,
        [
            HEADER,
            memory_line("Priya owns the search index.", "Priya", "search index"),
            relation_line(),  # stored already, with 5 mentions
            relation_line(source="Priya", target="search index", relation="owns", mentions=3),
            relation_line(source="Priya", target="search index", relation="owns"),  # a repeat
        ],
    )
    out, err = run_import(path)
    assert err == ""
    assert "2 imported, 2 deduplicated, 0 refused of 4 items." in out
    assert "line 3: already stored: relation Kenji -deploys-> billing-api" in out
    assert "line 4: imported relation Priya -owns-> search index" in out
    edges = {
        (r.source.name, r.relation_type, r.target.name): r.mentions
        for r in Relation.objects.select_related("source", "target")
    }
    assert edges == {("Kenji", "deploys", "billing-api"): 5, ("Priya", "owns", "search index"): 3}

    out, _ = run_import(path)
    assert "0 imported, 4 deduplicated, 0 refused of 4 items." in out
    assert Relation.objects.count() == 2 and Entity.objects.count() == 4


def test_an_import_sent_to_another_agent_puts_the_relations_between_that_agents_entities(
    tmp_path,
):
    path = tmp_path / "relations.jsonl"
    write_lines(
        path,
        [
            HEADER,
            memory_line("Kenji deploys billing-api.", "Kenji", "billing-api"),
            relation_line(),
        ],
    )
    run_import(path, "--agent", "support-bot")
    relation = Relation.objects.select_related("source", "target").get()
    assert (relation.source.agent_id, relation.target.agent_id) == ("support-bot", "support-bot")


def test_a_relation_naming_an_entity_no_memory_mentions_is_refused_and_writes_nothing(tmp_path):
    path = tmp_path / "relations.jsonl"
    write_lines(
        path,
        [
            HEADER,
            memory_line("Kenji is on call this week.", "Kenji"),
            relation_line(),  # billing-api: no memory mentions it
            relation_line(source="Rita", target="Kenji", relation="manages"),
        ],
    )
    out, err = run_import(path)
    assert err.splitlines() == [
        "line 3: refused: target: no memory of the agent here mentions this entity: a relation "
        "is imported with the memories that name its two entities, which state it from then on "
        "(import them, or a file that holds them, first)",
        "line 4: refused: source: no memory of the agent here mentions this entity: a relation "
        "is imported with the memories that name its two entities, which state it from then on "
        "(import them, or a file that holds them, first)",
    ]
    assert "1 imported, 0 deduplicated, 2 refused of 3 items." in out
    assert not Relation.objects.exists()
    assert list(Entity.objects.values_list("canonical_name", flat=True)) == ["kenji"]


@pytest.mark.django_db(transaction=True)
def test_an_export_imported_after_a_purge_brings_no_purged_name_back(tmp_path):
    # A review's repro: the old export's relation line made "Alice Smith" again, an entity no
    # memory mentions, which no purge could reach any more.
    from pipeline import purge

    told("Alice Smith owns billing-api.", "Alice Smith", "owns", "billing-api", agent="ops")
    path = tmp_path / "old.jsonl"
    path.write_text("".join(export.lines(agent="ops")))
    receipt = purge.purge(
        purge.Request(purge.Scope.AGENT, agent="ops"), reason="left", actor=Actor("ada", "operator")
    )
    assert receipt.verified and not Entity.objects.exists()
    out, err = run_import(path)
    assert "refused: source: no memory of the agent here mentions this entity" in err
    assert not Entity.objects.exists() and not Relation.objects.exists()


def test_a_relation_only_a_forgotten_memory_stated_between_names_others_mention_stays_out():
    told("Priya joined in May.", "Priya", "joined in", "May")
    told("The search index is rebuilt nightly.", "search index", "rebuilt", "nightly")
    gone = told("Priya owns the search index.", "Priya", "owns", "search index")
    forget(gone.id, actor=AGENT, reason="wrong")
    assert ("default", "Priya", "owns", "search index") not in relations_of(export_records())
    assert ("default", "Priya", "owns", "search index") in relations_of(
        export_records("--include-deleted")
    )


def test_a_relation_naming_what_an_erasure_left_is_not_exported():
    told("Alice Smith owns billing-api.", "Alice Smith", "owns", "billing-api")
    Entity.objects.filter(canonical_name="alice smith").update(
        name="[redacted:pii]", canonical_name="[redacted:pii]"
    )
    assert relations_of(export_records()) == []


def test_a_bad_relation_line_is_refused_by_its_field_and_writes_nothing(tmp_path):
    path = tmp_path / "bad.jsonl"
    write_lines(
        path,
        [
            HEADER,
            relation_line(source="  "),
            relation_line(target="[redacted:pii]"),
            relation_line(relation=""),
            relation_line(mentions=0),
            relation_line(confidence=1.5),
            relation_line(kind="edge"),
            relation_line(createdAt="soon"),
        ],
    )
    out, err = run_import(path)
    assert err.splitlines() == [
        "line 2: refused: source: is required: the name of an entity",
        "line 3: refused: target: '[redacted:pii]' is what an erasure left, not an entity's name",
        "line 4: refused: relation: is required: what the source is to the target (uses, owns, "
        "...)",
        "line 5: refused: mentions: must be a whole number from 1 to 1000000",
        "line 6: refused: confidence: must be a number between 0 and 1",
        "line 7: refused: kind: must be 'relation', or left out for a memory",
        "line 8: refused: createdAt: 'soon' is not an ISO 8601 date and time, like "
        "2027-01-31T00:00:00Z",
    ]
    assert "0 imported, 0 deduplicated, 7 refused of 7 items." in out
    assert not Relation.objects.exists() and not Entity.objects.exists()


def test_an_imported_mention_of_what_an_erasure_left_links_no_one(tmp_path):
    # A second review: two memories mentioning "[redacted:pii]" were linked to one entity,
    # joining the different people the marker stands for.
    path = tmp_path / "marked.jsonl"
    write_lines(
        path,
        [
            HEADER,
            memory_line("[redacted:pii] owns billing-api.", "[redacted:pii]", "billing-api"),
            memory_line("[redacted:pii] runs payroll.", "[redacted:pii]"),
        ],
    )
    out, err = run_import(path)
    assert err == "" and "2 imported" in out
    assert list(Entity.objects.values_list("canonical_name", flat=True)) == ["billing-api"]


def test_a_relation_stated_more_often_than_an_import_takes_exports_a_line_it_takes(tmp_path):
    from memory.imported_relations import MAX_MENTIONS

    told("Kenji deploys billing-api.", "Kenji", "deploys", "billing-api")
    Relation.objects.update(mentions=MAX_MENTIONS + 5)
    path = tmp_path / "all.jsonl"
    path.write_text("".join(export.lines()))
    (line,) = [r for r in map(json.loads, path.read_text().splitlines()) if r.get("kind")]
    assert line["mentions"] == MAX_MENTIONS
    out, err = run_import(path, "--agent", "copy")
    assert err == "" and "2 imported" in out
    copy = Relation.objects.get(source__agent_id="copy")
    assert copy.mentions == MAX_MENTIONS
