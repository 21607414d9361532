"""Entity triples under review: listed on the job and proposal pages, approved or rejected once."""

import pytest

from memory.models import Entity, MemoryEntityMention, MemoryHistory, Relation
from pipeline.models import Proposal, TripleReview
from tests.pipeline_support import ScriptedModel, fact, raw

pytestmark = pytest.mark.django_db
TEXT = "Priya maintains the billing-api service. Kenji uses Grafana for dashboards."


@pytest.fixture
def triples(pipeline_run):
    """Two triples extracted by the offline model from one raw memory (shadow mode)."""
    (memory,) = pipeline_run(TEXT)
    found = list(TripleReview.objects.filter(source_memory=memory).order_by("position"))
    assert [str(t) for t in found] == [
        "Priya -maintains-> billing-api service",
        "Kenji -uses-> Grafana",
    ]
    assert all(t.status == "pending" for t in found)
    return found


@pytest.fixture
def decide(hx):
    def post(client, triple, htmx=False, follow=False, **data):
        headers = hx if htmx else {}
        return client.post(f"/triples/{triple.id}/decide/", data, follow=follow, **headers)

    return post


def test_approving_creates_entities_relation_and_mentions_of_the_raw_memory(
    reviewer_client, triples, decide
):
    priya = triples[0]
    assert not Entity.objects.exists()
    next_url = f"/jobs/{priya.job_id}/"
    response = decide(
        reviewer_client, priya, decision="approve", note="matches the wiki", next=next_url
    )
    assert response.status_code == 302 and response["Location"] == next_url

    priya.refresh_from_db()
    assert (priya.status, priya.decided_by, priya.note) == ("approved", "rita", "matches the wiki")
    source = Entity.objects.get(canonical_name="priya")
    target = Entity.objects.get(canonical_name="billing-api service")
    assert (source.entity_type, source.agent_id) == ("person", "default")
    relation = Relation.objects.get(source=source, target=target)
    assert relation.relation_type == "maintains" and relation.confidence == pytest.approx(0.7)
    mentions = MemoryEntityMention.objects.filter(memory_id=priya.source_memory_id)
    assert {m.entity_id for m in mentions} == {source.id, target.id}
    audit = MemoryHistory.objects.get(memory_id=priya.source_memory_id, event="reviewed")
    assert audit.changed_by == "rita" and audit.metadata["tripleId"] == priya.id
    # The other triple is still waiting; the message is shown on the next page.
    assert TripleReview.objects.get(id=triples[1].id).status == "pending"
    page = reviewer_client.get(next_url).content.decode()
    assert "Approved by rita" in page


def test_rejecting_writes_no_entity(reviewer_client, triples, decide):
    response = decide(reviewer_client, triples[1], decision="reject", note="Grafana is retired")
    assert response.status_code == 302
    triple = TripleReview.objects.get(id=triples[1].id)
    assert (triple.status, triple.decided_by, triple.note) == (
        "rejected",
        "rita",
        "Grafana is retired",
    )
    assert not Entity.objects.exists() and not Relation.objects.exists()
    assert not MemoryEntityMention.objects.exists()


def test_a_second_decision_is_refused_and_says_who_decided(
    reviewer_client, admin_client_role, triples, decide
):
    decide(reviewer_client, triples[0], decision="approve")
    response = decide(admin_client_role, triples[0], decision="reject", htmx=True)
    assert response.status_code == 200
    body = response.content.decode()
    assert "already approved by rita" in body and 'class="row-note bad"' in body
    assert TripleReview.objects.get(id=triples[0].id).status == "approved"
    assert Relation.objects.count() == 1
    plain = decide(admin_client_role, triples[0], decision="approve", follow=True)
    assert "already approved by rita" in plain.content.decode()
    assert Relation.objects.get().mentions == 1  # not counted twice


def test_a_viewer_cannot_decide(viewer_client, triples, decide):
    assert decide(viewer_client, triples[0], decision="approve").status_code == 403
    assert decide(viewer_client, triples[0], decision="approve", htmx=True).status_code == 403
    assert TripleReview.objects.get(id=triples[0].id).status == "pending"
    assert not Entity.objects.exists()


def test_htmx_gets_the_updated_row_fragment(reviewer_client, triples, decide):
    response = decide(reviewer_client, triples[0], htmx=True, decision="approve", next="/x/")
    assert response.status_code == 200
    body = response.content.decode().strip()
    assert body.startswith(f'<tr id="triple-{triples[0].id}"') and "<html" not in body
    assert 'data-status="approved"' in body and "by rita" in body
    assert "<form" not in body  # decided: no buttons any more
    assert "toast" in response["HX-Trigger"]


def test_an_unknown_decision_or_triple_is_refused(reviewer_client, triples, decide):
    response = decide(reviewer_client, triples[0], htmx=True, decision="maybe")
    assert "Choose approve or reject" in response.content.decode()
    assert TripleReview.objects.get(id=triples[0].id).status == "pending"
    assert (
        reviewer_client.post("/triples/999999/decide/", {"decision": "approve"}).status_code == 404
    )
    assert reviewer_client.get(f"/triples/{triples[0].id}/decide/").status_code == 405


def test_an_offsite_next_falls_back_to_the_job_page(reviewer_client, triples, decide):
    response = decide(reviewer_client, triples[0], decision="reject", next="https://evil.example/")
    assert response["Location"] == f"/jobs/{triples[0].job_id}/#triple-{triples[0].id}"


def test_triples_are_listed_on_the_job_and_proposal_pages(reviewer_client, viewer_client, triples):
    job_id = triples[0].job_id
    page = reviewer_client.get(f"/jobs/{job_id}/").content.decode()
    assert 'id="triples"' in page and "Entity triples under review" in page
    assert page.count('data-triple="') == 2 and page.count("/decide/") >= 2
    assert "70%" in page  # confidence
    proposal = Proposal.objects.filter(job_id=job_id).first()
    page = reviewer_client.get(f"/proposals/{proposal.id}/").content.decode()
    assert "Entity triples from this job" in page and page.count('data-triple="') == 2
    assert f'action="/triples/{triples[0].id}/decide/"' in page
    assert f'name="next" value="/proposals/{proposal.id}/"' in page
    # A viewer sees the triples and their status, without buttons.
    page = viewer_client.get(f"/jobs/{job_id}/").content.decode()
    assert page.count('data-triple="') == 2 and "/triples/" not in page


def test_the_proposal_page_decides_a_triple_and_returns_there(reviewer_client, triples, decide):
    proposal = Proposal.objects.filter(job_id=triples[0].job_id).first()
    here = f"/proposals/{proposal.id}/"
    response = decide(reviewer_client, triples[1], decision="approve", next=here, follow=True)
    assert response.redirect_chain[-1][0] == here
    body = response.content.decode()
    assert "Approved by rita" in body and 'data-status="approved"' in body


def test_triple_text_is_escaped(fake_ollama, reviewer_client, decide):
    from pipeline.tasks import process_pending

    ScriptedModel(
        fake_ollama,
        facts=[fact("The billing team ships on Fridays.")],
        entities=[
            {
                "source": "<script>alert(1)</script>",
                "source_type": "person",
                "relationship": "<b>owns</b>",
                "target": "<img src=x onerror=alert(2)>",
                "target_type": "project",
                "confidence": 0.9,
            }
        ],
    )
    memory = raw("The billing team ships on Fridays. Said by the lead.").memory
    process_pending()
    triple = TripleReview.objects.get(source_memory=memory)
    for url in (
        f"/jobs/{triple.job_id}/",
        f"/proposals/{Proposal.objects.get(job_id=triple.job_id).id}/",
    ):
        body = reviewer_client.get(url).content.decode()
        assert "<script>alert(1)</script>" not in body and "&lt;script&gt;alert(1)" in body
        assert "<img src=x" not in body and "<b>owns</b>" not in body
    fragment = decide(reviewer_client, triple, htmx=True, decision="reject").content.decode()
    assert "<script>alert(1)</script>" not in fragment and "&lt;script&gt;" in fragment
