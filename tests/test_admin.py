"""Django admin lists every model; audit tables are read-only there."""

import pytest

from memory.writes import Actor, remember

pytestmark = pytest.mark.django_db

PAGES = [
    "memory/memory",
    "memory/memoryhistory",
    "memory/memorycold",
    "memory/embedding",
    "memory/entity",
    "memory/relation",
    "memory/memoryentitymention",
    "memory/job",
    "memory/apitoken",
    "pipeline/proposal",
    "pipeline/llmcall",
    "pipeline/configchange",
    "pipeline/pipelineconfig",
]


@pytest.mark.parametrize("page", PAGES)
def test_every_model_has_an_admin_list(admin_client, page):
    remember("Priya prefers squash merges", actor=Actor("t", "agent"))
    assert admin_client.get(f"/admin/{page}/").status_code == 200


def test_the_audit_trail_cannot_be_changed_or_deleted_in_the_admin(admin_client):
    memory = remember("Priya prefers squash merges", actor=Actor("t", "agent")).memory
    row = memory.history.get()
    assert admin_client.get("/admin/memory/memoryhistory/add/").status_code == 403
    response = admin_client.post(
        f"/admin/memory/memoryhistory/{row.pk}/change/", {"reason": "rewritten"}
    )
    assert response.status_code in (403, 200)
    row.refresh_from_db()
    assert row.reason == "remember"
    assert (
        admin_client.post(
            f"/admin/memory/memoryhistory/{row.pk}/delete/", {"post": "yes"}
        ).status_code
        == 403
    )
    assert memory.history.count() == 1
