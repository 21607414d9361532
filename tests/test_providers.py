"""The provider table: every provider gives both clients, the lists of choices come from it, and
chat and embeddings are chosen separately (MEMORY_LLM_PROVIDER, MEMORY_EMBEDDING_PROVIDER)."""

import re

import pytest
from django.core.management import CommandError, call_command

from memory.models import Memory
from pipeline.llm import PROVIDERS, ProviderError, get_chat_client, get_embedder
from pipeline.models import LlmCall


@pytest.mark.parametrize("name", list(PROVIDERS))
def test_every_provider_in_the_table_gives_a_chat_client_and_an_embedder(name, settings):
    chat = get_chat_client(name)
    embedder = get_embedder(name)
    assert chat.provider == embedder.provider == name
    assert callable(chat.extract) and callable(chat.decide) and callable(embedder.embed)
    assert chat.model and embedder.model and embedder.dimensions == 768


def test_a_provider_missing_from_the_table_is_a_clear_error_for_chat_and_embeddings(settings):
    settings.MEMORY_LLM_PROVIDER = "llamacpp"
    with pytest.raises(ProviderError, match=r"unknown MEMORY_LLM_PROVIDER 'llamacpp' \(known: "):
        get_chat_client()
    settings.MEMORY_LLM_PROVIDER = "offline"
    settings.MEMORY_EMBEDDING_PROVIDER = "cohere"
    with pytest.raises(ProviderError, match="unknown MEMORY_EMBEDDING_PROVIDER 'cohere'") as error:
        get_embedder()
    assert all(name in str(error.value) for name in ["auto", *PROVIDERS])


def test_the_replay_page_offers_exactly_the_providers_of_the_table(reviewer_client):
    body = reviewer_client.get("/replay/").content.decode()
    select = re.search(r'<select name="provider".*?</select>', body, re.DOTALL).group()
    assert re.findall(r'<option value="([^"]+)"', select) == list(PROVIDERS)
    for provider in PROVIDERS.values():
        assert f">{provider.label}</option>" in select


def test_seed_demo_accepts_auto_and_the_providers_of_the_table():
    with pytest.raises(CommandError) as error:
        call_command("seed_demo", "--provider", "llamacpp")
    assert all(f"'{name}'" in str(error.value) for name in ["auto", *PROVIDERS])


@pytest.mark.django_db
def test_chat_offline_with_embeddings_from_ollama(fake_ollama, settings, pipeline_run):
    settings.MEMORY_LLM_PROVIDER = "offline"
    settings.MEMORY_EMBEDDING_PROVIDER = "ollama"
    (source,) = pipeline_run("Priya prefers squash merges for every repository.")
    assert fake_ollama.calls("/api/chat") == []
    assert fake_ollama.calls("/api/embed")
    assert Memory.objects.get(id=source.id).embedding_model == settings.MEMORY_EMBEDDING_MODEL
    calls = {call.kind: call.provider for call in LlmCall.objects.all()}
    assert calls["extract"] == "offline" and calls["embed"] == "ollama"


@pytest.mark.django_db
def test_chat_from_ollama_with_embeddings_offline(fake_ollama, settings, pipeline_run):
    settings.MEMORY_LLM_PROVIDER = "ollama"
    settings.MEMORY_EMBEDDING_PROVIDER = "offline"
    (source,) = pipeline_run("Priya prefers squash merges for every repository.")
    assert fake_ollama.calls("/api/chat")
    assert fake_ollama.calls("/api/embed") == []
    assert Memory.objects.get(id=source.id).embedding_model == "offline-hash-768"
    calls = {call.kind: call.provider for call in LlmCall.objects.all()}
    assert calls["extract"] == "ollama" and calls["embed"] == "offline"


def test_a_blank_embedding_provider_follows_the_chat_provider(fake_ollama, settings):
    settings.MEMORY_EMBEDDING_PROVIDER = ""
    assert get_embedder().provider == "ollama"  # the fake_ollama fixture chose ollama for chat
    settings.MEMORY_LLM_PROVIDER = "offline"
    assert get_embedder().provider == "offline"


@pytest.mark.django_db
def test_health_reports_the_chat_and_the_embedding_provider(
    fake_ollama, settings, client, ingest_auth
):
    settings.MEMORY_LLM_PROVIDER = "offline"
    settings.MEMORY_EMBEDDING_PROVIDER = "auto"
    llm = client.get("/api/health", **ingest_auth).json()["llm"]  # the full report needs a token
    assert (llm["active"], llm["extractionModel"]) == ("offline", "offline-heuristic-v2")
    assert (llm["embeddingActive"], llm["embeddingModel"]) == ("ollama", "nomic-embed-text")
    assert llm["ollamaReachable"] is True


def _closed_port_url() -> str:
    """The URL of a port nothing listens on: a connection to it is refused at once."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}"


@pytest.mark.django_db
def test_health_names_an_ollama_named_outright_that_does_not_answer_as_a_problem(
    settings, client, ingest_auth
):
    """A QA pass: health said `ok: true` while every job failed on a model server that was down."""
    import time

    settings.OLLAMA_URL = _closed_port_url()
    settings.MEMORY_LLM_PROVIDER = "auto"  # auto: the offline heuristics serve, nothing is wrong
    for _ in range(50):  # the probe runs beside the request; its answer lands for the next one
        body = client.get("/api/health", **ingest_auth).json()
        if body["llm"]["ollamaReachable"] is not None:
            break
        time.sleep(0.1)
    assert body["llm"]["ollamaReachable"] is False
    assert body["ok"] is True and body["problems"] == []
    settings.MEMORY_LLM_PROVIDER = "ollama"
    body = client.get("/api/health", **ingest_auth).json()
    assert body["ok"] is False
    assert body["problems"] == [
        f"the model server at {settings.OLLAMA_URL} does not answer: jobs fail and are retried "
        "until it does"
    ]


@pytest.mark.django_db
def test_health_names_a_provider_that_cannot_be_made_and_a_nearly_full_disk(
    settings, client, ingest_auth, monkeypatch
):
    from api import health

    settings.MEMORY_LLM_PROVIDER = "offline"
    settings.MEMORY_EMBEDDING_PROVIDER = "llamacpp"
    body = client.get("/api/health", **ingest_auth).json()
    assert body["ok"] is False and len(body["problems"]) == 1
    assert body["problems"][0].startswith("the embedding client cannot be used (unknown ")
    settings.MEMORY_EMBEDDING_PROVIDER = ""
    body = client.get("/api/health", **ingest_auth).json()
    assert body["ok"] is True and body["disk"]["freeBytes"] > 0
    monkeypatch.setattr(health, "DISK_LOW_BYTES", body["disk"]["freeBytes"] * 2)
    body = client.get("/api/health", **ingest_auth).json()
    assert body["ok"] is False
    assert "the data folder's disk has" in body["problems"][0]
    assert "507 storage_full" in body["problems"][0]


@pytest.mark.django_db
def test_health_names_a_hung_ollama_on_every_poll_once_a_probe_said_no(
    settings, client, ingest_auth
):
    """A second review: a server that takes connections and never answers read "unknown" (ok)
    to every poll a minute apart, each starting a probe that outlived the request; and
    "Ollama" spelt with a capital was not taken for ollama at all."""
    import socket
    import time

    from pipeline.llm import transport

    hung = socket.socket()
    hung.bind(("127.0.0.1", 0))
    hung.listen(8)  # connections wait in its backlog: nothing ever answers
    settings.OLLAMA_URL = f"http://127.0.0.1:{hung.getsockname()[1]}"
    settings.MEMORY_PROBE_TIMEOUT_SECONDS = 1
    settings.MEMORY_LLM_PROVIDER = "Ollama"
    try:
        first = client.get("/api/health", **ingest_auth).json()
        assert first["llm"]["ollamaReachable"] is None and first["problems"] == []
        time.sleep(1.5)  # the probe gives up: no
        assert client.get("/api/health", **ingest_auth).json()["ok"] is False
        transport._probe_cache.clear()  # a minute later: the answer has aged out, a probe is out
        later = client.get("/api/health", **ingest_auth).json()
        assert later["llm"]["ollamaReachable"] is False and later["ok"] is False
        assert "does not answer" in later["problems"][0]
    finally:
        hung.close()
