"""Who asserted each memory (issue 26, item 5): `person`, `agent`, `model` or `import`, set on
every write path, carried by the API's and MCP's memory JSON, shown on the pages, a queue
filter, and the authority that keeps the pipeline in full mode from changing a person's memory."""

import json

import pytest

from api.auth import create_token
from api.mcp_server import run_tool
from memory import writes
from memory.models import Job, Memory, MemoryHistory
from memory.writes import Actor
from pipeline import review, tasks
from pipeline.models import Proposal
from tests.pipeline_support import (
    ADD_FACT,
    RAW_TEXT,
    UPDATE_FACT,
    four_decisions,
    raw,
    seed,
    seed_store,
    set_mode,
)

pytestmark = pytest.mark.django_db
DANA = Actor("dana")  # a reviewer in the dashboard (operator)


def token(*scopes):
    _, plain = create_token(f"tok-{'-'.join(scopes)}", scopes=list(scopes))
    return {"HTTP_AUTHORIZATION": f"Bearer {plain}"}, f"Bearer {plain}"


def remember(client, auth, **body):
    return client.post(
        "/api/memory/remember", json.dumps(body), content_type="application/json", **auth
    )


def written():
    return Memory.objects.count(), Job.objects.count(), MemoryHistory.objects.count()


# --- the API and MCP ------------------------------------------------------------------------------


def test_a_remembered_memory_is_asserted_by_an_agent_and_its_json_says_so(client):
    auth, _ = token("ingest")
    created = remember(client, auth, content="The billing team deploys on Tuesdays").json()
    detail = client.get(f"/api/memory/{created['id']}", **auth).json()
    assert detail["assertedBy"] == "agent"
    assert Memory.objects.get(id=created["id"]).asserted_by == "agent"


def test_asserted_by_person_without_the_assert_scope_is_403_and_writes_nothing(client):
    auth, _ = token("ingest", "review")
    before = written()
    response = remember(client, auth, content="Priya is on leave in May", assertedBy="person")
    assert response.status_code == 403
    assert response.json()["error"] == "forbidden" and "assert" in response.json()["message"]
    assert written() == before


def test_a_token_with_the_assert_scope_relays_a_persons_assertion(client):
    auth, _ = token("ingest", "assert")
    created = remember(client, auth, content="Priya is on leave in May", assertedBy="person")
    assert created.status_code == 201
    assert client.get(f"/api/memory/{created.json()['id']}", **auth).json()["assertedBy"] == (
        "person"
    )


@pytest.mark.parametrize("value", ["model", "import", "", 3])
def test_an_asserted_by_other_than_agent_or_person_is_400_and_writes_nothing(client, value):
    auth, _ = token("ingest", "assert")
    before = written()
    response = remember(client, auth, content="Priya is on leave in May", assertedBy=value)
    assert response.status_code == 400 and response.json()["error"] == "invalid_request"
    assert written() == before


def test_mcp_remember_honours_the_assert_scope_and_get_memory_carries_asserted_by():
    _, without = token("ingest")
    before = written()
    payload, is_error = run_tool(
        "remember", {"content": "Kenji owns billing", "assertedBy": "person"}, without, "c"
    )
    assert is_error and payload["error"] == "forbidden" and written() == before

    _, relaying = token("ingest", "assert")
    payload, is_error = run_tool(
        "remember", {"content": "Kenji owns billing", "assertedBy": "person"}, relaying, "c"
    )
    assert not is_error, payload
    memory, is_error = run_tool("get_memory", {"id": payload["id"]}, relaying, "c")
    assert not is_error and memory["assertedBy"] == "person"


# --- the pipeline and reviewers -------------------------------------------------------------------


@pytest.fixture
def store(db):
    return seed_store()


def run_job():
    result = raw(RAW_TEXT)
    tasks.process_pending()
    return {p.action: p for p in Proposal.objects.filter(job=result.job)}


def test_full_mode_never_updates_or_deletes_a_memory_a_person_asserted(fake_ollama, store):
    Memory.objects.filter(id__in=[store.postgres.id, store.staging.id]).update(asserted_by="person")
    four_decisions(fake_ollama, store)
    set_mode("full")
    proposals = run_job()

    for action, target in (("update", store.postgres), ("delete", store.staging)):
        assert proposals[action].status == "pending"
        assert proposals[action].blocked_reason == "person_asserted"
        after = Memory.objects.get(id=target.id)
        assert (after.version, after.is_deleted, after.content) == (1, False, target.content)
    # What it added is the model's; a reviewer can still approve the held UPDATE.
    added = Memory.objects.get(id=proposals["add"].created_memory_id)
    assert proposals["add"].status == "applied" and added.asserted_by == "model"
    review.approve(proposals["update"].id, DANA)
    assert Memory.objects.get(id=store.postgres.id).content == UPDATE_FACT


def test_full_mode_still_updates_an_agents_memory(fake_ollama, store):
    four_decisions(fake_ollama, store)
    set_mode("full")
    proposals = run_job()
    assert proposals["update"].status == "applied"
    assert Memory.objects.get(id=store.postgres.id).asserted_by == "model"


def test_a_reviewers_edit_makes_the_text_a_persons_and_an_approval_as_is_keeps_it_the_models(
    fake_ollama, store
):
    four_decisions(fake_ollama, store)
    proposals = run_job()  # shadow: everything waits
    review.approve(proposals["update"].id, DANA)
    review.approve(proposals["add"].id, DANA, content=ADD_FACT + " (confirmed with her)")
    assert Memory.objects.get(id=store.postgres.id).asserted_by == "model"
    added = Proposal.objects.get(id=proposals["add"].id).created_memory
    assert added.asserted_by == "person"


def test_a_reviewers_edited_update_is_a_persons(fake_ollama, store):
    four_decisions(fake_ollama, store)
    proposals = run_job()
    review.approve(proposals["update"].id, DANA, content="The billing service runs on Postgres 17")
    assert Memory.objects.get(id=store.postgres.id).asserted_by == "person"


def test_a_revert_gives_the_memory_back_its_previous_authority(fake_ollama, store):
    four_decisions(fake_ollama, store)
    proposals = run_job()
    review.approve(proposals["update"].id, DANA, content="The billing service runs on Postgres 17")
    review.revert_once(proposals["update"].id, DANA, reason="wrong")
    reverted = Memory.objects.get(id=store.postgres.id)
    assert reverted.content == "The billing service runs on Postgres 14"
    assert reverted.asserted_by == "agent"


# --- the dashboard --------------------------------------------------------------------------------


def test_an_edit_in_the_dashboard_makes_the_memory_a_persons(reviewer_client):
    memory = seed("Billing runs on Postgres 16")
    response = reviewer_client.post(
        f"/memories/{memory.id}/action/",
        {
            "action": "edit",
            "content": "Billing runs on Postgres 17",
            "reason": "up",
            "if_version": 1,
        },
    )
    assert response.status_code == 302
    assert Memory.objects.get(id=memory.id).asserted_by == "person"


def test_the_memory_page_and_its_lineage_show_who_asserted_it(viewer_client):
    memory = writes.remember(
        "Priya is on leave in May", actor=Actor("agent-one", "agent"), asserted_by="person"
    ).memory
    page = viewer_client.get(f"/memories/{memory.id}/").content.decode()
    assert "asserted by person" in page
    assert "Asserted by a person." in page  # the lineage's first step
    listing = viewer_client.get("/memories/").content.decode()
    assert 'data-testid="authority"' in listing


def test_the_raw_step_says_who_asserts_it_now_once_its_text_was_edited(viewer_client):
    """The lineage's first step tells how the memory was written: after an edit made it a
    person's, it says the text was edited since (it read as if the agent's write were a
    person's)."""
    memory = writes.remember("Priya is on leave in May", actor=Actor("slack-bot", "agent")).memory
    page = viewer_client.get(f"/memories/{memory.id}/").content.decode()
    assert "Asserted by an agent." in page and "edited since" not in page
    writes.modify(
        memory.id,
        {"content": "Priya is on leave in June", "asserted_by": "person"},
        actor=Actor("ada", "operator"),
        reason="moved",
    )
    page = viewer_client.get(f"/memories/{memory.id}/").content.decode()
    assert "Written by slack-bot (agent)" in page
    assert "Its text was edited since: now asserted by a person." in page


def test_the_review_queue_shows_and_filters_by_the_targets_authority(
    fake_ollama, store, viewer_client
):
    Memory.objects.filter(id=store.postgres.id).update(asserted_by="person")
    four_decisions(fake_ollama, store)
    proposals = run_job()
    page = viewer_client.get("/review/?authority=person").content.decode()
    assert proposals["update"].id in page and "asserted by person" in page
    assert proposals["delete"].id not in page and proposals["add"].id not in page
    assert proposals["delete"].id in viewer_client.get("/review/?authority=agent").content.decode()


def test_an_edit_through_the_api_makes_the_text_the_agents(client):
    memory = writes.remember(
        "Priya is on leave in May", actor=Actor("agent-one", "agent"), asserted_by="person"
    ).memory
    auth, _ = token("review")
    response = client.patch(
        f"/api/memory/{memory.id}",
        json.dumps({"content": "Priya is on leave in June", "reason": "moved"}),
        content_type="application/json",
        **auth,
    )
    assert response.status_code == 200 and response.json()["assertedBy"] == "agent"
    # The trail keeps the authority the new text replaced, as it keeps every other field's.
    updated = MemoryHistory.objects.get(memory_id=memory.id, event="updated")
    assert updated.metadata["changes"] == {"asserted_by": ["person", "agent"]}
    # A change of its tags alone leaves the text, and so its authority, as it was.
    Memory.objects.filter(id=memory.id).update(asserted_by="person")
    response = client.patch(
        f"/api/memory/{memory.id}",
        json.dumps({"tags": ["hr"], "reason": "tagged"}),
        content_type="application/json",
        **auth,
    )
    assert response.status_code == 200 and response.json()["assertedBy"] == "person"


def test_a_derived_memorys_lineage_says_the_model_asserted_it(fake_ollama, store, viewer_client):
    four_decisions(fake_ollama, store)
    set_mode("full")
    added = Memory.objects.get(id=run_job()["add"].created_memory_id)
    page = viewer_client.get(f"/memories/{added.id}/").content.decode()
    assert "Asserted by the model." in page and "asserted by model" in page


def test_the_migration_gives_derived_memories_the_model_and_the_rest_an_agent():
    import importlib

    from django.apps import apps

    derived = seed("Billing runs on Postgres 16", source_type="pipeline-v2")
    agents = seed("Notes from the sync")
    Memory.objects.update(asserted_by="agent")  # as the column's default left every row
    importlib.import_module("memory.migrations.0010_memory_asserted_by").fill(apps, None)
    assert Memory.objects.get(id=derived.id).asserted_by == "model"
    assert Memory.objects.get(id=agents.id).asserted_by == "agent"


@pytest.mark.parametrize(
    ("scopes", "authority"), [(["review"], "agent"), (["review", "assert"], "person")]
)
def test_a_text_edited_through_a_token_no_person_holds_is_a_persons_only_with_assert(
    client, fake_ollama, store, scopes, authority
):
    # Found by a QA pass: a token without the `assert` scope approved its own agent's ADD with
    # an edited text, and the memory was asserted by a person, which only that scope may make.
    four_decisions(fake_ollama, store)
    proposals = run_job()
    auth, _ = token(*scopes)
    body = json.dumps({"content": ADD_FACT + " (confirmed)"})
    approved = client.post(
        f"/api/proposals/{proposals['add'].id}/approve",
        body,
        content_type="application/json",
        **auth,
    )
    assert approved.status_code == 200, approved.json()
    memory_id = approved.json()["createdMemoryId"]
    assert Memory.objects.get(id=memory_id).asserted_by == authority


@pytest.mark.parametrize("first_is_the_bot", [True, False], ids=["bot-first", "person-first"])
def test_under_the_two_person_rule_the_text_is_asserted_by_whoever_wrote_it(
    fake_ollama, store, first_is_the_bot
):
    # A second review: the authority followed the second approver, so a token without `assert`
    # wrote the text and a person's second approval made it a person's (and the reverse).
    from tests.pipeline_support import configure

    configure(review__destructiveApprovals=2)
    Memory.objects.filter(id=store.postgres.id).update(asserted_by="person")  # needs two
    four_decisions(fake_ollama, store)
    proposals = run_job()
    create_token("bot", scopes=["review"])
    bot = Actor("bot", asserts=False)  # as the API builds a token no person holds
    text = UPDATE_FACT + " (the first approver's own words)"
    first, second = (bot, DANA) if first_is_the_bot else (DANA, bot)
    review.approve(proposals["update"].id, first, content=text)
    review.approve(proposals["update"].id, second)
    memory = Memory.objects.get(id=store.postgres.id)
    assert memory.content == text
    assert memory.asserted_by == ("agent" if first_is_the_bot else "person")
