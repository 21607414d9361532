"""Ollama: chat over POST /api/chat, embeddings over POST /api/embed, reachability via GET /api/tags."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from django.conf import settings

from pipeline.llm.clients import HttpChat, token_count, unit_rows
from pipeline.llm.transport import Post, ProviderError, post_json, reachable


class OllamaChat(HttpChat):
    """POST /api/chat, stream false, `format` = the JSON schema of the expected object, temperature 0."""

    provider = "ollama"

    def __init__(self, base_url: str, model: str, timeout: float):
        super().__init__(model, timeout)
        self.base_url = base_url.rstrip("/")

    @classmethod
    def from_settings(cls, model: str | None = None) -> OllamaChat:
        return cls(
            settings.OLLAMA_URL,
            model or settings.MEMORY_EXTRACTION_MODEL,
            settings.MEMORY_LLM_TIMEOUT_SECONDS,
        )

    def _post(self, prompt: str, schema: dict, kind: str) -> Post:
        return Post(
            f"{self.base_url}/api/chat",
            {
                "model": self.model,
                "messages": [{"role": "user", "content": prompt}],
                "stream": False,
                "format": schema,
                "options": {"temperature": 0},
            },
            self.timeout,
        )

    def _read(self, body: dict):
        message = body.get("message")
        if not isinstance(message, dict) or not isinstance(message.get("content"), str):
            raise ProviderError("Ollama /api/chat answer has no message content")
        return (
            message["content"],
            token_count(body.get("prompt_eval_count")),
            token_count(body.get("eval_count")),
        )


@dataclass
class OllamaEmbedder:
    """POST /api/embed with the `input` list; answers `embeddings`, one vector per input."""

    provider: ClassVar[str] = "ollama"

    base_url: str
    model: str
    dimensions: int
    timeout: float

    @classmethod
    def from_settings(cls) -> OllamaEmbedder:
        return cls(
            settings.OLLAMA_URL,
            settings.MEMORY_EMBEDDING_MODEL,
            settings.MEMORY_EMBEDDING_DIMENSIONS,
            settings.MEMORY_EMBED_TIMEOUT_SECONDS,
        )

    def embed(self, texts: list[str]) -> list[np.ndarray]:
        body = post_json(
            f"{self.base_url.rstrip('/')}/api/embed",
            {"model": self.model, "input": texts},
            timeout=self.timeout,
            vectors=True,
        )
        vectors = body.get("embeddings")
        if not isinstance(vectors, list):
            raise ProviderError("Ollama /api/embed answer has no 'embeddings' list")
        return unit_rows(vectors, len(texts), self.dimensions)


def ollama_reachable(base_url: str | None = None) -> bool:
    """Whether the Ollama server answers (cached for a while by the transport)."""
    return reachable(f"{(base_url or settings.OLLAMA_URL).rstrip('/')}/api/tags")
