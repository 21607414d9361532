"""The transaction rule: no embedding or model client runs while a write transaction is open,
and only the write modules open one."""

import ast
from pathlib import Path

import pytest
from django.db import transaction

from memory import writes
from memory.guard import ModelCallInTransaction
from memory.writes import Actor
from pipeline.llm import get_embedder
from pipeline.llm.offline import OfflineEmbedder


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
    from pipeline.llm import get_chat_client
    from pipeline.llm.offline import OfflineChat

    with pytest.raises(ModelCallInTransaction), transaction.atomic():
        get_chat_client().extract("Priya prefers squash merges for every repository.")
    with pytest.raises(ModelCallInTransaction), transaction.atomic():
        OfflineChat().extract("Priya prefers squash merges for every repository.")
    assert fake_ollama.calls("/api/chat") == []


@pytest.mark.django_db(transaction=True)
def test_the_api_and_the_pipeline_call_models_only_outside_transactions(
    fake_ollama, client, admin_auth
):
    """The whole path (remember, patch with re-embedding, recall, job) runs with the guard armed."""
    from pipeline.tasks import process_pending

    response = client.post(
        "/api/memory/remember",
        {"content": "Kenji deploys billing-api with Terraform."},
        content_type="application/json",
        **admin_auth,
    )
    assert response.status_code == 201
    memory_id = response.json()["id"]
    assert process_pending() == {"completed": 1}
    response = client.patch(
        f"/api/memory/{memory_id}",
        {"content": "Kenji deploys billing-api with Terraform Cloud.", "reason": "fix"},
        content_type="application/json",
        **admin_auth,
    )
    assert response.status_code == 200
    response = client.post(
        "/api/memory/recall",
        {"query": "billing-api Terraform"},
        content_type="application/json",
        **admin_auth,
    )
    assert response.status_code == 200 and response.json()["results"]
    assert fake_ollama.calls("/api/chat") and fake_ollama.calls("/api/embed")
    writes.forget(memory_id, actor=Actor("t"), reason="cleanup")


# --- who may open a transaction -------------------------------------------------------------------

ROOT = Path(__file__).resolve().parent.parent
# The write modules (ruff's banned-api says the same): store writes, the pipeline's transactions,
# and the benchmark's bulk load of a synthetic store.
# copy_store fills a separate target database in one transaction (it only reads the store).
MAY_OPEN_TRANSACTIONS = {
    "memory/writes.py",
    "memory/feedback.py",
    "memory/jobs.py",
    "pipeline/writes",
    "devtools/bench.py",
    "devtools/bench_scale.py",  # the growth run bulk-loads its synthetic store, as bench.py does
    "memory/management/commands/copy_store.py",
}


def imports_transaction(source: str) -> bool:
    """True when the source imports django.db.transaction, at any depth."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.level == 0:
            names = {f"{node.module}.{alias.name}" for alias in node.names} | {node.module}
        elif isinstance(node, ast.Import):
            names = {alias.name for alias in node.names}
        else:
            continue
        if "django.db.transaction" in names:
            return True
    return False


def test_only_the_write_modules_open_transactions():
    opening = {
        str(path.relative_to(ROOT))
        for package in ("memory", "pipeline", "api", "dashboard", "devtools")
        for path in (ROOT / package).rglob("*.py")
        if "migrations" not in path.parts and imports_transaction(path.read_text())
    }
    outside = {
        path
        for path in opening
        if not any(
            path == allowed or path.startswith(f"{allowed}/") for allowed in MAY_OPEN_TRANSACTIONS
        )
    }
    assert outside == set()
    assert "pipeline/writes/record.py" in opening  # the job's one write is still one transaction


def test_a_planted_transaction_import_is_caught_even_inside_a_function():
    assert imports_transaction("def f():\n    from django.db import connection, transaction\n")
    assert imports_transaction("from django.db.transaction import atomic\n")
    assert not imports_transaction("from django.db import IntegrityError, models\n")
