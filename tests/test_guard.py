"""The transaction rule: no embedding or model client runs while a write transaction is open."""

import pytest
from django.db import transaction

from memory import writes
from memory.guard import ModelCallInTransaction
from memory.writes import Actor
from pipeline.embedders import OfflineEmbedder, get_embedder


@pytest.mark.django_db(transaction=True)
def test_embedding_clients_refuse_to_run_inside_a_transaction(fake_ollama):
    with pytest.raises(ModelCallInTransaction), transaction.atomic():
        get_embedder().embed(["inside"])
    assert fake_ollama.calls("/api/embed") == []  # refused before any byte was sent
    with pytest.raises(ModelCallInTransaction), transaction.atomic():
        OfflineEmbedder(768).embed(["inside"])
    assert len(get_embedder().embed(["outside"])) == 1


@pytest.mark.django_db(transaction=True)
def test_chat_clients_refuse_to_run_inside_a_transaction(fake_ollama):
    from pipeline.llm import OfflineChat, get_chat_client

    with pytest.raises(ModelCallInTransaction), transaction.atomic():
        get_chat_client().extract("Priya prefers squash merges for every repository.")
    with pytest.raises(ModelCallInTransaction), transaction.atomic():
        OfflineChat().extract("Priya prefers squash merges for every repository.")
    assert fake_ollama.calls("/api/chat") == []


@pytest.mark.django_db(transaction=True)
def test_the_api_and_the_pipeline_call_models_only_outside_transactions(fake_ollama, client):
    """The whole path (remember, patch with re-embedding, recall, job) runs with the guard armed."""
    from api.auth import create_token
    from pipeline.tasks import process_pending

    _, token = create_token("t", scopes=["admin"])
    auth = {"HTTP_AUTHORIZATION": f"Bearer {token}"}
    response = client.post(
        "/api/memory/remember",
        {"content": "Kenji deploys billing-api with Terraform."},
        content_type="application/json",
        **auth,
    )
    assert response.status_code == 201
    memory_id = response.json()["id"]
    assert process_pending() == {"completed": 1}
    response = client.patch(
        f"/api/memory/{memory_id}",
        {"content": "Kenji deploys billing-api with Terraform Cloud.", "reason": "fix"},
        content_type="application/json",
        **auth,
    )
    assert response.status_code == 200
    response = client.post(
        "/api/memory/recall",
        {"query": "billing-api Terraform"},
        content_type="application/json",
        **auth,
    )
    assert response.status_code == 200 and response.json()["results"]
    assert fake_ollama.calls("/api/chat") and fake_ollama.calls("/api/embed")
    writes.forget(memory_id, actor=Actor("t"), reason="cleanup")
