"""Embedding clients over real HTTP to the fake Ollama server, and the provider choice."""

import json

import numpy as np
import pytest

from pipeline.llm import ProviderError, get_embedder, resolve_provider, transport
from pipeline.llm.ollama import OllamaEmbedder
from pipeline.llm.openai import OpenAIEmbedder
from tests.fake_ollama import Script


def test_ollama_embed_posts_the_input_list_and_normalises_vectors(fake_ollama):
    embedder = get_embedder()
    assert isinstance(embedder, OllamaEmbedder)
    vectors = embedder.embed(["Priya prefers squash merges", "Kafka carries billing events"])
    assert [v.shape for v in vectors] == [(768,), (768,)]
    assert all(np.linalg.norm(v) == pytest.approx(1.0, abs=1e-5) for v in vectors)
    payload = fake_ollama.calls("/api/embed")[0]
    assert payload == {
        "model": "nomic-embed-text",
        "input": ["Priya prefers squash merges", "Kafka carries billing events"],
    }


def test_openai_compatible_embeddings_keep_input_order(fake_ollama, settings):
    settings.OPENAI_BASE_URL = fake_ollama.url + "/v1"
    fake_ollama.script(
        "/v1/embeddings",
        Script(
            {"data": [{"index": 1, "embedding": [0.0, 2.0]}, {"index": 0, "embedding": [3.0, 0.0]}]}
        ),
    )
    embedder = OpenAIEmbedder(settings.OPENAI_BASE_URL, "sk-test", "text-embedding-3-small", 2, 2)
    first, second = embedder.embed(["a", "b"])
    assert first.tolist() == [1.0, 0.0] and second.tolist() == [0.0, 1.0]


@pytest.mark.parametrize(
    ("script", "message"),
    [
        (Script({"error": "model not found"}, status=404), "answered 404"),
        (Script({"error": "boom"}, status=500), "answered 500"),
        (Script(""), "empty body"),
        (Script("<html>gateway</html>"), "invalid JSON"),
        (Script({"embeddings": "nope"}), "no 'embeddings' list"),
        (Script({"embeddings": [[0.1, 0.2]]}), "1 vectors for 2 inputs"),
        (Script({"embeddings": [[0.1], [None]]}), "malformed vector"),
        (Script({"embeddings": [[0.5] * 384] * 2}), "vectors of 384 dimensions; the store holds"),
        (Script({"embeddings": [[1.0]] * 2}, delay=1.5), "timed out"),
    ],
)
def test_every_embedding_failure_becomes_one_provider_error(fake_ollama, script, message):
    fake_ollama.script("/api/embed", script)
    with pytest.raises(ProviderError, match=message):
        get_embedder().embed(["a", "b"])


def test_an_embedding_answer_reads_as_the_standard_library_reads_it_even_where_orjson_refuses(
    fake_ollama,
):
    """Embedding answers are read by orjson, and by json where orjson refuses one: a byte order
    mark and UTF-16 (json reads both) still give the vectors, a NaN is still a malformed vector,
    and every float is the float json reads."""
    rng = np.random.default_rng(7)
    rows = [[float(f"{x:.9g}") for x in rng.normal(size=768)] for _ in range(2)]
    expected = [np.asarray(row, dtype=np.float32) for row in rows]
    expected = [row / np.linalg.norm(row) for row in expected]
    plain = json.dumps({"embeddings": rows})
    for body in (plain, b"\xef\xbb\xbf" + plain.encode(), plain.encode("utf-16")):
        fake_ollama.script("/api/embed", Script(body))
        vectors = get_embedder().embed(["a", "b"])
        assert all(np.array_equal(v, e) for v, e in zip(vectors, expected, strict=True))
    fake_ollama.script("/api/embed", Script('{"embeddings": [[0.1, NaN], [0.2, 0.3]]}'))
    with pytest.raises(ProviderError, match="malformed vector"):
        get_embedder().embed(["a", "b"])


def test_a_refused_connection_is_a_provider_error(settings):
    embedder = OllamaEmbedder("http://127.0.0.1:9", "nomic-embed-text", 768, 1)
    with pytest.raises(ProviderError, match="unreachable"):
        embedder.embed(["a"])


def test_auto_uses_ollama_when_it_answers_and_offline_otherwise(fake_ollama, settings):
    settings.MEMORY_LLM_PROVIDER = "auto"
    assert resolve_provider() == "ollama"
    settings.OLLAMA_URL = "http://127.0.0.1:9"
    transport._probe_cache.clear()
    assert resolve_provider() == "offline"
    assert get_embedder().model == "offline-hash-768"


def test_an_unknown_provider_is_a_clear_error(settings):
    settings.MEMORY_LLM_PROVIDER = "llamacpp"
    with pytest.raises(ProviderError, match="unknown MEMORY_LLM_PROVIDER 'llamacpp'"):
        resolve_provider()


@pytest.mark.django_db
def test_a_job_with_vectors_of_the_wrong_size_stores_none_and_says_why(settings):
    """A model of another size (384 against the store's 768) answered; its vectors were stored
    where no search reads them and the job said nothing (a QA pass)."""
    from memory import writes
    from memory.models import Embedding, Job
    from memory.writes import Actor
    from pipeline import tasks
    from tests.fake_ollama import FakeOllama

    server = FakeOllama(384).start()
    settings.OLLAMA_URL, settings.MEMORY_LLM_PROVIDER = server.url, "ollama"
    memory = writes.remember(
        "The metrics pipeline exports to Prometheus every 15 seconds.", actor=Actor("a", "agent")
    ).memory
    try:
        tasks.process_pending()
    finally:
        server.stop()
    assert not Embedding.objects.exclude(dimensions=768).exists()
    job = Job.objects.get(memory=memory)
    said = json.dumps([job.result, job.error])
    assert "vectors of 384 dimensions; the store holds 768" in said


@pytest.mark.django_db
def test_maintenance_replaces_a_stored_vector_of_the_wrong_size_with_one_of_the_stores(settings):
    """Vectors of another size stored before they were refused were never searched nor replaced:
    the memory counted as embedded by the current model."""
    from memory import writes
    from memory.models import Embedding
    from memory.writes import Actor
    from pipeline import tasks

    embedder = get_embedder()
    memory = writes.remember(
        "The metrics pipeline exports to Prometheus every 15 seconds.", actor=Actor("a", "agent")
    ).memory
    small = np.ones(384, dtype=np.float32) / np.sqrt(384)
    Embedding.objects.create(
        content_hash=memory.content_hash,
        vector=small.tobytes(),
        dimensions=384,
        model=embedder.model,
        source_memory=memory,
        created_at=memory.created_at,
    )
    type(memory).objects.filter(id=memory.id).update(embedding_model=embedder.model)
    assert tasks.embed_missing() == 1
    stored = Embedding.objects.get(content_hash=memory.content_hash)
    assert (stored.dimensions, stored.model) == (768, embedder.model)
    assert tasks.embed_missing() == 0  # and nothing is embedded again once it is right
