"""Embedding clients (Ollama, OpenAI-compatible, offline feature hashing). No database access here."""

from __future__ import annotations

import hashlib
import logging
import os
import re
import time
from dataclasses import dataclass
from typing import Protocol

import httpx
import numpy as np
from django.conf import settings

from memory.guard import ensure_outside_transaction
from memory.vectors import Vector

log = logging.getLogger(__name__)


class ProviderError(RuntimeError):
    """A model server failed: refused, timed out, answered 4xx/5xx, or returned an unusable body."""


class Embedder(Protocol):
    model: str
    dimensions: int

    def embed(self, texts: list[str]) -> list[np.ndarray]: ...


def _normalise_rows(vectors: list[list[float]], expected: int) -> list[np.ndarray]:
    rows = []
    for vector in vectors:
        array = np.asarray(vector, dtype=np.float32)
        if array.ndim != 1 or array.size == 0 or not np.all(np.isfinite(array)):
            raise ProviderError("embedding server returned a malformed vector")
        norm = float(np.linalg.norm(array))
        rows.append(array / norm if norm > 0 else array)
    if len(rows) != expected:
        raise ProviderError(f"embedding server returned {len(rows)} vectors for {expected} inputs")
    return rows


_shared: dict[int, httpx.Client] = {}


def _client() -> httpx.Client:
    """One pooled client per process (created after any fork): no TLS setup per model call."""
    client = _shared.get(os.getpid())
    if client is None:
        client = _shared[os.getpid()] = httpx.Client()
    return client


def post_json(url: str, payload: dict, *, timeout: float, headers: dict | None = None) -> dict:
    """POST JSON and return the decoded object, turning every failure into ProviderError."""
    ensure_outside_transaction(f"POST {url}")
    try:
        response = _client().post(url, json=payload, timeout=timeout, headers=headers)
    except httpx.TimeoutException as exc:
        raise ProviderError(f"{url} timed out after {timeout:g}s") from exc
    except httpx.HTTPError as exc:
        raise ProviderError(f"{url} unreachable: {exc}") from exc
    if response.status_code >= 400:
        raise ProviderError(f"{url} answered {response.status_code}: {response.text[:300]}")
    if not response.content.strip():
        raise ProviderError(f"{url} answered with an empty body")
    try:
        body = response.json()
    except ValueError as exc:
        raise ProviderError(f"{url} answered with invalid JSON: {response.text[:200]}") from exc
    if not isinstance(body, dict):
        raise ProviderError(f"{url} answered with JSON that is not an object")
    return body


@dataclass
class OllamaEmbedder:
    base_url: str
    model: str
    dimensions: int
    timeout: float

    def embed(self, texts: list[str]) -> list[np.ndarray]:
        body = post_json(
            f"{self.base_url.rstrip('/')}/api/embed",
            {"model": self.model, "input": texts},
            timeout=self.timeout,
        )
        vectors = body.get("embeddings")
        if not isinstance(vectors, list):
            raise ProviderError("Ollama /api/embed answer has no 'embeddings' list")
        return _normalise_rows(vectors, len(texts))


@dataclass
class OpenAIEmbedder:
    base_url: str
    api_key: str
    model: str
    dimensions: int
    timeout: float

    def embed(self, texts: list[str]) -> list[np.ndarray]:
        body = post_json(
            f"{self.base_url.rstrip('/')}/embeddings",
            {"model": self.model, "input": texts},
            timeout=self.timeout,
            headers={"Authorization": f"Bearer {self.api_key}"} if self.api_key else None,
        )
        data = body.get("data")
        if not isinstance(data, list):
            raise ProviderError("/v1/embeddings answer has no 'data' list")
        ordered = sorted(
            data, key=lambda item: item.get("index", 0) if isinstance(item, dict) else 0
        )
        return _normalise_rows([item.get("embedding") for item in ordered], len(texts))


_TOKEN = re.compile(r"\w+", re.UNICODE)


@dataclass
class OfflineEmbedder:
    """Deterministic feature hashing (words, word pairs, character trigrams), L2-normalised.

    A fallback for trying the product without a model server: it captures lexical similarity,
    not meaning. Point MEMORY_LLM_PROVIDER at Ollama for real semantic vectors.
    """

    dimensions: int
    model: str = ""

    def __post_init__(self) -> None:
        self.model = self.model or f"offline-hash-{self.dimensions}"

    def _features(self, text: str):
        words = _TOKEN.findall(text.lower())
        for word in words:
            yield f"w:{word}", 1.0
            padded = f"#{word}#"
            for i in range(len(padded) - 2):
                yield f"c:{padded[i : i + 3]}", 0.35
        for left, right in zip(words, words[1:], strict=False):
            yield f"b:{left} {right}", 0.5

    def embed_one(self, text: str) -> np.ndarray:
        vector = np.zeros(self.dimensions, dtype=np.float32)
        for feature, weight in self._features(text):
            digest = hashlib.blake2b(feature.encode("utf-8"), digest_size=8).digest()
            bucket = int.from_bytes(digest[:4], "little") % self.dimensions
            sign = 1.0 if digest[4] & 1 else -1.0
            vector[bucket] += sign * weight
        norm = float(np.linalg.norm(vector))
        return vector / norm if norm > 0 else vector

    def embed(self, texts: list[str]) -> list[np.ndarray]:
        ensure_outside_transaction("offline embedder")
        return [self.embed_one(text) for text in texts]


_probe_cache: dict[str, tuple[float, bool]] = {}


def ollama_reachable(base_url: str | None = None, *, max_age: float = 30.0) -> bool:
    """Whether Ollama answers GET /api/tags; remembered for max_age seconds per URL."""
    url = (base_url or settings.OLLAMA_URL).rstrip("/")
    cached = _probe_cache.get(url)
    if cached and time.monotonic() - cached[0] < max_age:
        return cached[1]
    try:
        ok = (
            _client()
            .get(f"{url}/api/tags", timeout=settings.MEMORY_PROBE_TIMEOUT_SECONDS)
            .is_success
        )
    except httpx.HTTPError:
        ok = False
    _probe_cache[url] = (time.monotonic(), ok)
    return ok


def resolve_provider(configured: str | None = None) -> str:
    """The provider actually used: 'auto' becomes 'ollama' when it answers, else 'offline'."""
    provider = (configured or settings.MEMORY_LLM_PROVIDER).strip().lower()
    if provider == "auto":
        return "ollama" if ollama_reachable() else "offline"
    if provider not in {"ollama", "openai", "offline"}:
        raise ProviderError(f"unknown MEMORY_LLM_PROVIDER {provider!r}")
    return provider


def get_embedder(provider: str | None = None) -> Embedder:
    provider = resolve_provider(provider)
    dims = settings.MEMORY_EMBEDDING_DIMENSIONS
    if provider == "ollama":
        return OllamaEmbedder(
            settings.OLLAMA_URL,
            settings.MEMORY_EMBEDDING_MODEL,
            dims,
            settings.MEMORY_EMBED_TIMEOUT_SECONDS,
        )
    if provider == "openai":
        return OpenAIEmbedder(
            settings.OPENAI_BASE_URL,
            settings.OPENAI_API_KEY,
            settings.MEMORY_EMBEDDING_MODEL,
            dims,
            settings.MEMORY_EMBED_TIMEOUT_SECONDS,
        )
    return OfflineEmbedder(dims)


def embed_or_none(text: str) -> Vector | None:
    """A vector for text, or None when the embedding server fails (the maintenance sweep embeds
    it later). Call it before the write transaction, never inside one."""
    try:
        embedder = get_embedder()
        return Vector(embedder.embed([text])[0], embedder.model)
    except ProviderError as exc:
        log.warning("embedding failed, the maintenance sweep will retry: %s", exc)
        return None
