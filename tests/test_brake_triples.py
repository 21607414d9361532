"""The emergency brake stops an entity-triple approval like every other reviewer apply: nothing
enters the graph, the triple stays pending, and the reviewer is told why. Rejecting (which writes
nothing to the graph) still works."""

import pytest

from memory.models import Entity, MemoryEntityMention, Relation
from memory.writes import Actor, Refused
from pipeline import review as reviewing
from pipeline.models import TripleReview
from tests.pipeline_support import configure

pytestmark = pytest.mark.django_db
TEXT = "Priya maintains the billing-api service. Kenji uses Grafana for dashboards."
BRAKE_MESSAGE = "mutations are frozen: nothing can be applied until an admin lifts the brake"


@pytest.fixture
def frozen_triples(pipeline_run):
    (memory,) = pipeline_run(TEXT)
    configure(mutationsFrozen=True)
    triples = list(TripleReview.objects.filter(source_memory=memory).order_by("position"))
    assert len(triples) == 2 and all(t.status == "pending" for t in triples)
    return triples


def nothing_in_the_graph(triple) -> bool:
    return (
        not Entity.objects.exists()
        and not Relation.objects.exists()
        and not MemoryEntityMention.objects.filter(memory_id=triple.source_memory_id).exists()
    )


def test_approving_a_triple_under_the_brake_is_refused_like_an_approval(frozen_triples):
    triple = frozen_triples[0]
    with pytest.raises(Refused) as refused:
        reviewing.decide_triple(triple.id, Actor("rita"), approve=True)
    assert refused.value.code == "frozen" and refused.value.message == BRAKE_MESSAGE
    assert TripleReview.objects.get(id=triple.id).status == "pending"
    assert nothing_in_the_graph(triple)


def test_the_dashboard_says_the_brake_is_on_and_writes_nothing(reviewer_client, frozen_triples, hx):
    triple = frozen_triples[0]
    response = reviewer_client.post(f"/triples/{triple.id}/decide/", {"decision": "approve"}, **hx)
    assert response.status_code == 200
    assert "mutations are frozen" in response.content.decode()
    assert TripleReview.objects.get(id=triple.id).status == "pending"
    assert nothing_in_the_graph(triple)

    configure(mutationsFrozen=False)  # the brake is lifted: the same approval goes through
    reviewer_client.post(f"/triples/{triple.id}/decide/", {"decision": "approve"}, **hx)
    assert TripleReview.objects.get(id=triple.id).status == "approved"
    assert Entity.objects.filter(canonical_name="priya").exists()


def test_rejecting_a_triple_under_the_brake_still_works(reviewer_client, frozen_triples):
    triple = frozen_triples[1]
    reviewer_client.post(f"/triples/{triple.id}/decide/", {"decision": "reject"})
    assert TripleReview.objects.get(id=triple.id).status == "rejected"
    assert nothing_in_the_graph(triple)
