"""Model clients: the provider table (one line per provider: its chat and embedding clients), and
the configured chat client and embedder. Chat and embeddings are chosen separately
(MEMORY_LLM_PROVIDER, MEMORY_EMBEDDING_PROVIDER); 'auto' means Ollama when it answers, else offline.

Every call returns or records what the model saw; every provider failure raises ProviderError.
"""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass

from django.conf import settings

from memory.vectors import Vector
from pipeline.llm import offline, ollama, openai
from pipeline.llm.clients import CallRecord, ChatClient, Embedder
from pipeline.llm.offline import OFFLINE_MODEL
from pipeline.llm.transport import ProviderError

log = logging.getLogger(__name__)

__all__ = [
    "OFFLINE_MODEL",
    "PROVIDERS",
    "CallRecord",
    "ChatClient",
    "Embedder",
    "ProviderError",
    "embed_many_or_none",
    "embed_or_none",
    "get_chat_client",
    "get_embedder",
    "resolve_provider",
]


@dataclass(frozen=True)
class Provider:
    label: str
    chat: type
    embedder: type


PROVIDERS: dict[str, Provider] = {
    "ollama": Provider("Ollama", ollama.OllamaChat, ollama.OllamaEmbedder),
    "openai": Provider("OpenAI-compatible", openai.OpenAIChat, openai.OpenAIEmbedder),
    "offline": Provider("Offline heuristics", offline.OfflineChat, offline.OfflineEmbedder),
}


def resolve_provider(configured: str | None = None, *, setting: str = "MEMORY_LLM_PROVIDER") -> str:
    """The provider actually used: 'auto' becomes 'ollama' when it answers, else 'offline'.

    `configured` defaults to the named setting, which the error for an unknown name mentions.
    """
    provider = (configured or getattr(settings, setting)).strip().lower()
    if provider == "auto":
        return "ollama" if ollama.ollama_reachable() else "offline"
    if provider not in PROVIDERS:
        known = ", ".join(["auto", *PROVIDERS])
        raise ProviderError(f"unknown {setting} {provider!r} (known: {known})")
    return provider


def embedding_setting() -> str:
    """The setting that picks the embedder: MEMORY_EMBEDDING_PROVIDER, or the chat one when blank."""
    return (
        "MEMORY_EMBEDDING_PROVIDER" if settings.MEMORY_EMBEDDING_PROVIDER else "MEMORY_LLM_PROVIDER"
    )


def get_chat_client(provider: str | None = None, model: str | None = None) -> ChatClient:
    """The chat client of `provider` (default MEMORY_LLM_PROVIDER), with `model` or the default."""
    return PROVIDERS[resolve_provider(provider)].chat.from_settings(model)


def get_embedder(provider: str | None = None) -> Embedder:
    """The embedder of `provider` (default MEMORY_EMBEDDING_PROVIDER)."""
    name = resolve_provider(provider, setting=embedding_setting())
    return PROVIDERS[name].embedder.from_settings()


def embed_or_none(text: str, *, timeout: float | None = None) -> Vector | None:
    """A vector for text, or None when the embedding server fails (the maintenance sweep embeds
    it later). Call it before the write transaction, never inside one. `timeout` shortens the
    server's wait for callers that answer a person (recall)."""
    try:
        embedder = get_embedder()
        if timeout is not None and hasattr(embedder, "timeout"):
            embedder = dataclasses.replace(embedder, timeout=min(embedder.timeout, timeout))
        return Vector(embedder.embed([text])[0], embedder.model)
    except ProviderError as exc:
        log.warning("embedding failed, the maintenance sweep will retry: %s", exc)
        return None


def embed_many_or_none(texts: list[str]) -> list[Vector] | None:
    """One vector per text in one call, or None when the embedding server fails (the maintenance
    sweep embeds them later). Call it outside any write transaction."""
    try:
        embedder = get_embedder()
        return [Vector(values, embedder.model) for values in embedder.embed(texts)]
    except ProviderError as exc:
        log.warning(
            "embedding %d texts failed, the maintenance sweep will retry: %s", len(texts), exc
        )
        return None
