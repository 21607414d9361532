"""Redaction (issue 22, item 5) in the domain, on both engines: a span of a safety finding becomes
`[redacted:<kind>]` in the memory, its family and every copy (proposals, audits, model calls,
cold copies, jobs' results), the rest stays findable by keyword and vector, the audit never holds
the span, and a bad request writes nothing. The browser, the views and the files: their own
test files (test_redaction_views.py, browser/test_redaction_browser.py)."""

from __future__ import annotations

import hashlib
import json

import pytest

from dashboard import wording
from memory import writes
from memory.content import normalize
from memory.graph import Triple
from memory.models import (
    Embedding,
    Entity,
    Job,
    JobStatus,
    Memory,
    MemoryCold,
    MemoryEntityMention,
    MemoryHistory,
    Relation,
)
from memory.redaction import REDACTED_EVENT
from memory.search import hybrid_search
from memory.writes import Actor, Refused
from pipeline import review
from pipeline.llm import embed_or_none
from pipeline.models import LlmCall, Proposal, ProposalStatus
from pipeline.redaction import Request
from pipeline.tasks import process_pending
from pipeline.writes.jobs import claim_job
from tests.pipeline_support import ScriptedModel, decision, raw, seed, set_mode
from tests.test_purge_canary import every_value_holding

pytestmark = pytest.mark.django_db(transaction=True)  # PostgreSQL vacuums after the commit

SECRET = "hunter2-prod"
MARKER = "[redacted:password]"
RAW = (
    "Ops note: the staging DB password is hunter2-prod, and the nightly backup of the "
    "ledger runs at 02:00 on the replica."
)
EDITED = RAW + " Ask Dana before rotating it."
FACT = "The staging DB password is hunter2-prod"  # held for review: a password
DERIVED = (
    "Use hunter2-prod for the staging DB user app_rw"  # no finding: applied in controlled-write
)
UPDATE = "Use hunter2-prod for the staging DB user app_ro"  # an UPDATE of the derived memory
BACKUP = "The nightly backup of the ledger runs at 02:00 on the replica"
REVIEWER = Actor("rita")


def story(fake, *, edit: bool = True) -> Memory:
    """A raw memory whose job spread the password around: extraction and decision prompts and
    replies, a proposal held for review (pending, with a finding), a derived memory applied from
    it, then an edit (a cold copy, an audit with old and new text). Returns the raw memory."""
    set_mode("controlled-write")
    seed("The replica lives in the Frankfurt rack next to the ledger database")
    ScriptedModel(fake, facts=[FACT, DERIVED, BACKUP])
    memory = raw(RAW).memory
    process_pending()
    held = Proposal.objects.get(source_memory=memory, fact_content=FACT)
    assert (held.status, held.safety_kinds) == (ProposalStatus.PENDING, "password")
    derived = Memory.objects.get(source_id=memory.id, content=DERIVED)
    # Another raw memory's fact proposes an UPDATE of the derived memory: its target text (and,
    # as the model wrote it, its fact) hold the span; in controlled-write it waits for review.
    ScriptedModel(fake, facts=[UPDATE], decisions={UPDATE: decision("update", derived)})
    raw("Ops note two: the staging DB user is read-only from now on.")
    process_pending()
    assert Proposal.objects.get(target_memory=derived).target_content == DERIVED
    if edit:
        writes.modify(memory.id, {"content": EDITED}, actor=REVIEWER, reason="who to ask")
    assert len(every_value_holding(SECRET)) > 10, "the story spread the span around"
    return Memory.objects.get(id=memory.id)


def redact(memory_id: str, span: str = SECRET, kind: str = "password", **kwargs):
    """A reviewer's redaction (`any_span=True`: an admin's, of a span no finding holds)."""
    asked = Request(
        memory_id, span, kind, kwargs.pop("proposal_id", None), kwargs.pop("any_span", False)
    )
    return review.redact(
        asked,
        reason=kwargs.pop("reason", "a leaked password"),
        actor=REVIEWER,
    )


def test_every_copy_of_the_span_becomes_the_marker_and_nothing_else_changes(fake_ollama):
    memory = story(fake_ollama)
    receipt = redact(memory.id)

    assert receipt.verified and receipt.found == [] and receipt.kind == "password"
    assert every_value_holding(SECRET) == []
    memory.refresh_from_db()
    assert memory.content == EDITED.replace(SECRET, MARKER)
    assert memory.normalized_content == normalize(memory.content).normalized
    assert memory.content_hash == normalize(memory.content).hash and memory.version == 3
    derived = Memory.objects.get(source_id=memory.id, content__startswith="Use ")
    assert derived.content == DERIVED.replace(SECRET, MARKER) and derived.id in receipt.memories
    assert Memory.objects.get(source_id=memory.id, content=BACKUP).version == 1  # untouched
    # The proposal's fact and the candidates its decision saw; the audits' old and new text;
    # what the model saw and said; the cold copy of the version before the edit.
    update = Proposal.objects.get(target_memory=derived)
    assert update.target_content == derived.content and update.fact_content == UPDATE.replace(
        SECRET, MARKER
    )
    held = Proposal.objects.get(source_memory=memory, fact_content=FACT.replace(SECRET, MARKER))
    assert held.fingerprint and held.safety == [] and held.safety_kinds == ""
    edit = MemoryHistory.objects.get(memory=memory, event="updated")
    assert (edit.old_content, edit.new_content) == (
        RAW.replace(SECRET, MARKER),
        EDITED.replace(SECRET, MARKER),
    )
    calls = LlmCall.objects.filter(job__memory=memory)
    assert {c.kind for c in calls if MARKER in c.prompt} >= {"extract"}
    assert any(MARKER in c.raw_response for c in calls)
    cold = MemoryCold.objects.get(memory=memory)
    assert cold.content == RAW.replace(SECRET, MARKER)
    assert cold.content_hash == normalize(cold.content).hash
    job = Job.objects.get(memory=memory)
    assert MARKER in json.dumps(job.result) and SECRET not in json.dumps(job.result)


def test_the_rest_of_the_memory_stays_findable_by_keyword_and_vector(fake_ollama, drain_queue):
    memory = story(fake_ollama)
    old_hashes = [memory.content_hash, normalize(RAW).hash]  # the text now and before the edit
    assert Embedding.objects.filter(content_hash=normalize(RAW).hash).exists()  # the job's
    redact(memory.id)
    assert not Embedding.objects.filter(content_hash__in=old_hashes).exists()  # both vectors
    drain_queue()  # the queued embedding of the new text, as a worker runs it
    memory.refresh_from_db()
    assert memory.embedding_model and Embedding.objects.filter(content_hash=memory.content_hash)

    by_words = hybrid_search("nightly backup ledger replica Dana", k=3)
    assert by_words[0].memory_id == memory.id and by_words[0].keyword_score
    assert [h for h in hybrid_search(SECRET, k=5) if h.memory_id == memory.id] == []
    vector = embed_or_none(memory.content)
    by_vector = hybrid_search("qqq", k=3, alpha=1.0, query_vector=vector.values, model=vector.model)
    assert by_vector[0].memory_id == memory.id and by_vector[0].vector_score > 0.99


def test_the_redacted_event_names_who_why_and_the_kind_never_the_span_or_its_hash(fake_ollama):
    memory = story(fake_ollama)
    receipt = redact(memory.id, reason="password pasted by an agent")
    event = MemoryHistory.objects.get(id=receipt.event)
    assert (event.memory_id, event.event, event.changed_by, event.reason) == (
        memory.id,
        REDACTED_EVENT,
        "rita",
        "password pasted by an agent",
    )
    assert event.metadata["kind"] == "password" and event.metadata["version"] == 3
    assert event.metadata["receipt"]["verified"] is True
    kept = json.dumps([event.old_content, event.new_content, event.metadata, event.reason])
    hashes = {
        hashlib.sha256(text.encode()).hexdigest() for text in (SECRET, RAW, EDITED, FACT, DERIVED)
    } | {normalize(text).hash for text in (SECRET, RAW, EDITED, FACT, DERIVED)}
    assert SECRET not in kept and not any(h in kept for h in hashes)
    derived_event = MemoryHistory.objects.get(
        event=REDACTED_EVENT, memory__content__startswith="Use "
    )
    assert derived_event.metadata["redactedFromMemoryId"] == memory.id


def test_a_proposal_held_for_its_password_is_approvable_once_redacted(fake_ollama):
    memory = story(fake_ollama, edit=False)  # an edit would make it stale on its own
    held = Proposal.objects.get(source_memory=memory, fact_content=FACT)
    assert wording.waiting(held) == wording.WAITING["safety_review"]
    redact(memory.id, proposal_id=held.id)
    held.refresh_from_db()
    assert not held.source_changed and not held.needs_confirmation  # not stale, no finding
    # Held for the finding when it was recorded (its blockedReason says so); it no longer has one.
    assert held.blocked_reason == "safety_review"
    assert (
        wording.waiting(held) == "waits for a reviewer: held for a safety finding, redacted since"
    )
    review.decide(held.id, REVIEWER, "approve")  # no "approve it anyway?" any more
    held.refresh_from_db()
    assert held.status == ProposalStatus.APPLIED
    assert held.created_memory.content == FACT.replace(SECRET, MARKER)


def test_a_span_only_in_a_proposals_fact_is_redacted_from_the_proposal(fake_ollama):
    set_mode("shadow")
    ScriptedModel(fake_ollama, facts=["The staging DB password is sw0rdf1sh-9"])
    memory = raw("Dana told me the staging password on the phone today.").memory
    process_pending()
    proposal = Proposal.objects.get(source_memory=memory)
    with pytest.raises(Refused) as refused:
        redact(memory.id, "sw0rdf1sh-9")  # not in the memory's text
    assert refused.value.code == "span_not_found"
    receipt = redact(memory.id, "sw0rdf1sh-9", proposal_id=proposal.id)
    proposal.refresh_from_db()
    assert receipt.verified and receipt.memories == []
    assert proposal.fact_content == "The staging DB password is [redacted:password]"
    assert MemoryHistory.objects.get(id=receipt.event).metadata["changed"] is False
    assert every_value_holding("sw0rdf1sh-9") == []


def test_a_memory_redacted_into_another_ones_text_is_deleted_as_its_duplicate():
    first = seed("The wifi password is BlueFalcon77 for the guest network")
    second = seed("The wifi password is RedFalcon88 for the guest network")
    redact(first.id, "BlueFalcon77")
    receipt = redact(second.id, "RedFalcon88")
    first.refresh_from_db()
    second.refresh_from_db()
    # The partial UNIQUE (agent, content hash) holds: the memory that had the text keeps it.
    assert (
        first.content
        == second.content
        == "The wifi password is [redacted:password] for the guest network"
    )
    assert first.content_hash == second.content_hash
    assert not first.is_deleted and second.is_deleted
    assert receipt.duplicates == {second.id: first.id} and receipt.verified
    event = MemoryHistory.objects.get(id=receipt.event)
    assert event.metadata["duplicateOfMemoryId"] == first.id and event.metadata["deleted"] is True
    live = Memory.objects.filter(content_hash=first.content_hash, is_deleted=False)
    assert list(live.values_list("id", flat=True)) == [first.id]
    # Another agent's memory with the same redacted text is no duplicate of it.
    third = seed("The wifi password is GreenFalcon99 for the guest network", agent_id="ops-bot")
    assert redact(third.id, "GreenFalcon99").duplicates == {}


@pytest.mark.parametrize(
    ("span", "kind", "reason", "code"),
    [
        ("not-in-the-text", "password", "leak", "span_not_found"),
        ("", "password", "leak", "empty_span"),
        ("   ", "password", "leak", "empty_span"),
        ("BlF", "password", "leak", "span_too_short"),
        ("BlueFalcon77", "hidden", "leak", "invalid_kind"),
        ("BlueFalcon77", "nonsense", "leak", "invalid_kind"),
        ("BlueFalcon77", "password", "", "reason_required"),
        ("BlueFalcon77", "password", "it was BlueFalcon77", "reason_holds_text"),
        ("redacted", "password", "leak", "invalid_span"),
    ],
)
def test_a_bad_request_is_refused_and_writes_nothing(span, kind, reason, code):
    memory = seed("The wifi password is BlueFalcon77, redacted nowhere yet")
    before = (Memory.objects.get(id=memory.id).version, MemoryHistory.objects.count())
    with pytest.raises(Refused) as refused:
        redact(memory.id, span, kind, reason=reason)
    assert refused.value.code == code
    assert (Memory.objects.get(id=memory.id).version, MemoryHistory.objects.count()) == before
    assert "BlueFalcon77" in Memory.objects.get(id=memory.id).content


def test_an_unknown_or_purged_memory_is_refused():
    with pytest.raises(Refused) as refused:
        redact("no-such-memory")
    assert refused.value.code == "not_found"
    memory = seed("The wifi password is BlueFalcon77")
    review.purge(review.purging.Request("memory", memory.id), reason="gone", actor=REVIEWER)
    with pytest.raises(Refused) as refused:
        redact(memory.id, "BlueFalcon77")
    assert refused.value.code == "already_purged"


def test_a_memory_outside_the_family_holding_the_span_is_named_and_the_receipt_fails():
    memory = seed("The wifi password is BlueFalcon77 for the guest network")
    other = seed("Reminder: BlueFalcon77 also opens the printer admin page")
    receipt = redact(memory.id, "BlueFalcon77")
    assert not receipt.verified and receipt.others == [other.id]
    assert {"where": "memories.content", "count": 1} in receipt.found
    assert Memory.objects.get(id=other.id).content.startswith("Reminder: BlueFalcon77")
    # Redacted there too (by an admin: no finding holds it there), nothing is left.
    assert redact(other.id, "BlueFalcon77", any_span=True).verified


def test_the_span_in_the_memorys_source_id_who_and_type_is_redacted_too():
    """A QA pass: sourceId kept the address, the receipt named the memory itself as another
    memory holding it, and no later redaction could find it (not in the content)."""
    memory = writes.remember(
        "Nadia Okafor lives at 12 Birchwood Lane, Leeds.",
        actor=Actor("crm-sync", "agent"),
        create_job=False,
        source_id="crm-12 Birchwood Lane",
        who="crm 12 Birchwood Lane",
        type="home 12 Birchwood Lane",
    ).memory
    receipt = redact(memory.id, "12 Birchwood Lane", kind="address")
    assert receipt.verified and receipt.others == [], receipt.found
    memory.refresh_from_db()
    assert (memory.source_id, memory.who, memory.type) == (
        "crm-[redacted:address]",
        "crm [redacted:address]",
        "home [redacted:address]",
    )


def test_a_family_memory_holding_the_span_only_in_its_type_is_rewritten(fake_ollama):
    """A second review: the family was read for the span in content, why and tags only."""
    memory = story(fake_ollama, edit=False)
    derived = Memory.objects.get(source_id=memory.id, content=DERIVED)
    Memory.objects.filter(id=derived.id).update(
        content="Use the vault for the staging DB user app_rw", type=f"pw {SECRET}"
    )
    receipt = redact(memory.id)
    assert receipt.verified, receipt.found
    assert Memory.objects.get(id=derived.id).type == f"pw {MARKER}"


def test_the_records_of_a_memory_outside_the_family_wait_for_its_own_redaction():
    """Found by a QA pass: redacting one memory rewrote another memory's audit trail (its
    `created` row, its proposals) while that memory's text kept the password: its page showed an
    original text it never had, with no redaction of its own."""
    memory = seed("The wifi password is BlueFalcon77 for the guest network")
    other = seed("Reminder: BlueFalcon77 also opens the printer admin page", agent_id="other")
    created = MemoryHistory.objects.get(memory_id=other.id, event="created")
    receipt = redact(memory.id, "BlueFalcon77")
    assert not receipt.verified and receipt.others == [other.id]
    assert {"where": "memory_history.new_content", "count": 1} in receipt.found
    assert MemoryHistory.objects.get(id=created.id).new_content == other.content  # untouched
    assert not MemoryHistory.objects.filter(memory_id=other.id, event=REDACTED_EVENT).exists()
    assert (
        "BlueFalcon77"
        not in MemoryHistory.objects.get(memory_id=memory.id, event="created").new_content
    )
    # Its own redaction (an admin's) takes its text and its records, with its own event.
    assert redact(other.id, "BlueFalcon77", any_span=True).verified
    assert "BlueFalcon77" not in MemoryHistory.objects.get(id=created.id).new_content
    assert MemoryHistory.objects.filter(memory_id=other.id, event=REDACTED_EVENT).exists()


def test_a_job_running_on_the_old_text_is_cancelled_and_queued_again(fake_ollama):
    memory = raw("The wifi password is BlueFalcon77 for the guest network").memory
    job = Job.objects.get(memory=memory)
    assert claim_job(job.id) is not None  # a worker read the old text and is calling the model
    redact(memory.id, "BlueFalcon77")
    job.refresh_from_db()
    assert job.status == JobStatus.CANCELLED and "BlueFalcon77" not in (job.error or "")
    fresh = Job.objects.exclude(id=job.id).get(memory=memory)
    assert fresh.status == JobStatus.PENDING


def test_another_memorys_running_job_is_started_again_too(fake_ollama):
    """It may have read the old text as a candidate: it would log it after the receipt."""
    memory = raw("The wifi password is BlueFalcon77 for the guest network").memory
    process_pending()
    other = raw("The guest wifi password changes monthly").memory
    job = Job.objects.get(memory=other)
    assert claim_job(job.id) is not None
    redact(memory.id, "BlueFalcon77")
    job.refresh_from_db()
    assert job.status == JobStatus.CANCELLED and "redacted while it ran" in job.error
    assert Job.objects.exclude(id=job.id).get(memory=other).status == JobStatus.PENDING


def _person(name: str, **kwargs) -> Memory:
    return seed(
        f"{name} rotates the ledger keys",
        triples=[Triple(name, "rotates", "ledger keys", "person")],
        **kwargs,
    )


def test_names_redacted_to_one_marker_stay_apart_as_numbered_entities():
    people = {name: _person(name) for name in ("Dana Whitfield", "Bob Marsh", "Ines Okafor")}
    for name, memory in people.items():
        assert redact(memory.id, name, "pii", reason="a colleague's name", any_span=True).verified
    mentions = MemoryEntityMention.objects.filter(entity__entity_type="person")
    names = dict(mentions.values_list("memory_id", "entity__name"))
    # Each memory still names its own entity: the graph keeps the three people apart.
    assert sorted(names.values()) == [
        "[redacted:pii]",
        "[redacted:pii] (2)",
        "[redacted:pii] (3)",
    ]
    assert set(names) == {memory.id for memory in people.values()}
    edges = Relation.objects.filter(target__canonical_name="ledger keys")
    assert sorted(edges.values_list("source__name", "mentions")) == [
        ("[redacted:pii]", 1),
        ("[redacted:pii] (2)", 1),
        ("[redacted:pii] (3)", 1),
    ]
    for name in people:
        assert every_value_holding(name) == []
    # Another agent's redacted name is no neighbour of these: it keeps the plain marker.
    other = _person("Dana Whitfield", agent_id="ops-bot")
    redact(other.id, "Dana Whitfield", "pii", reason="a colleague's name", any_span=True)
    assert Entity.objects.get(agent_id="ops-bot", entity_type="person").name == "[redacted:pii]"


def test_names_purged_to_one_marker_stay_apart_as_numbered_entities():
    # A memory that is only a name: purging it scrubs the name from the entity that a kept
    # memory still mentions.
    for name in ("Dana Whitfield", "Bob Marsh"):
        _person(name)
        gone = seed(name)
        review.purge(review.purging.Request("memory", gone.id), reason="gone", actor=REVIEWER)
    assert sorted(
        Entity.objects.filter(entity_type="person").values_list("name", "canonical_name")
    ) == [("[purged]", "[purged]"), ("[purged] (2)", "[purged] (2)")]


def test_a_name_whose_lowercase_form_held_the_span_is_renamed_from_its_scrubbed_form():
    # The entity was named "Dana Whitfield" by a triple; the text holds the name in lowercase, as
    # the entity's canonical name does: scrubbing the canonical name renames the entity too.
    memory = seed(
        "ask dana whitfield before rotating the ledger keys",
        triples=[Triple("Dana Whitfield", "rotates", "ledger keys", "person")],
    )
    assert redact(
        memory.id, "dana whitfield", "pii", reason="a colleague's name", any_span=True
    ).verified
    entity = Entity.objects.get(entity_type="person")
    assert (entity.name, entity.canonical_name) == ("[redacted:pii]", "[redacted:pii]")
    assert every_value_holding("Dana Whitfield") == []


def test_a_later_triple_naming_the_bare_marker_links_to_no_redacted_entity():
    first, second = _person("Dana Whitfield"), _person("Bob Marsh")
    for memory, name in ((first, "Dana Whitfield"), (second, "Bob Marsh")):
        assert redact(memory.id, name, "pii", reason="a colleague's name", any_span=True).verified
    hidden = {entity.pk: entity.name for entity in Entity.objects.filter(entity_type="person")}
    assert sorted(hidden.values()) == ["[redacted:pii]", "[redacted:pii] (2)"]
    # A text written after the redaction that names the marker (a model reading the redacted
    # text, an agent copying it): the marker stands for two people, so it links to neither.
    later = seed(
        "[redacted:pii] approved the ledger rotation",
        triples=[
            Triple("[redacted:pii]", "approved", "ledger rotation", "person"),
            Triple("[Redacted:PII] (2)", "approved", "ledger rotation", "person"),
            Triple("Ines Okafor", "approved", "ledger rotation", "person"),
        ],
    )
    linked = set(
        MemoryEntityMention.objects.filter(memory=later).values_list("entity__name", flat=True)
    )
    assert linked == {"Ines Okafor", "ledger rotation"}
    assert not Relation.objects.filter(source_id__in=hidden, target__name="ledger rotation")
    assert Entity.objects.filter(pk__in=hidden).count() == 2  # and no new marker entity
    assert not Entity.objects.filter(canonical_name="[redacted:pii] (3)")


def test_the_markers_an_erasure_writes_are_the_ones_no_entity_is_linked_by():
    from memory.erasure import PURGED
    from memory.linker import is_erasure_marker
    from memory.redaction import marker
    from pipeline.safety import REDACTABLE_KINDS

    for kind in REDACTABLE_KINDS:
        assert is_erasure_marker(marker(kind)) and is_erasure_marker(f"{marker(kind)} (12)")
    assert is_erasure_marker(PURGED) and is_erasure_marker(f" {PURGED.upper()}  (2)")
    for name in ("Dana [redacted:pii]", "[redacted:pii] Ops", "redacted", "[purged", "Purged"):
        assert not is_erasure_marker(name)


def test_an_entity_a_memory_outside_the_family_mentions_waits_for_its_own_redaction():
    """A QA pass: another agent's entity "Vaultline" was renamed by the redaction of this
    memory, while that agent's memory naming it was left as it was (named in the receipt)."""
    memory = seed("The wifi password is Vaultline-7731 for the guest network")
    other = writes.remember(
        "Omar keeps Vaultline-7731 on a sticky note.",
        actor=REVIEWER,
        agent_id="other",
        create_job=False,
        triples=[Triple("Omar", "keeps", "Vaultline-7731")],
    ).memory
    receipt = redact(memory.id, "Vaultline-7731")
    assert receipt.others == [other.id] and not receipt.verified
    names = set(Entity.objects.filter(agent_id="other").values_list("name", flat=True))
    assert "Vaultline-7731" in names  # left with the memory that names it
    assert redact(other.id, "Vaultline-7731", any_span=True).verified
    names = set(Entity.objects.filter(agent_id="other").values_list("name", flat=True))
    assert "Vaultline-7731" not in names


def test_a_reviewer_redacts_from_a_derived_memory_a_finding_of_its_raw_memory(fake_ollama):
    """A second review: the derived memory's own text holds no finding of the password (the
    scan needs "password is" before it), its raw memory's does, and the redaction reaches the
    same family either way."""
    memory = story(fake_ollama, edit=False)
    derived = Memory.objects.get(source_id=memory.id, content=DERIVED)
    receipt = redact(derived.id)
    assert receipt.verified, receipt.found
    assert SECRET not in Memory.objects.get(id=memory.id).content
