"""OpenAI-compatible servers (OpenAI, vLLM, llama.cpp, LM Studio...): POST /chat/completions with a
json_schema response format, POST /embeddings; the API key goes in a Bearer header when set."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from django.conf import settings

from pipeline.llm.clients import HttpChat, token_count, unit_rows
from pipeline.llm.transport import Post, ProviderError, post_json


def _auth(api_key: str) -> dict | None:
    return {"Authorization": f"Bearer {api_key}"} if api_key else None


class OpenAIChat(HttpChat):
    """POST /v1/chat/completions with a json_schema response format, temperature 0."""

    provider = "openai"

    def __init__(self, base_url: str, api_key: str, model: str, timeout: float):
        super().__init__(model, timeout)
        self.base_url, self.api_key = base_url.rstrip("/"), api_key

    @classmethod
    def from_settings(cls, model: str | None = None) -> OpenAIChat:
        return cls(
            settings.OPENAI_BASE_URL,
            settings.OPENAI_API_KEY,
            model or settings.MEMORY_EXTRACTION_MODEL,
            settings.MEMORY_LLM_TIMEOUT_SECONDS,
        )

    def _post(self, prompt: str, schema: dict, kind: str) -> Post:
        return Post(
            f"{self.base_url}/chat/completions",
            {
                "model": self.model,
                "messages": [{"role": "user", "content": prompt}],
                "temperature": 0,
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {"name": kind, "schema": schema},
                },
            },
            self.timeout,
            _auth(self.api_key),
        )

    def _read(self, body: dict):
        try:
            content = body["choices"][0]["message"]["content"]
        except (KeyError, IndexError, TypeError) as exc:
            raise ProviderError("chat completion answer has no choices[0].message.content") from exc
        usage = body.get("usage") if isinstance(body.get("usage"), dict) else {}
        return (
            content,
            token_count(usage.get("prompt_tokens")),
            token_count(usage.get("completion_tokens")),
        )


@dataclass
class OpenAIEmbedder:
    """POST /v1/embeddings; answers `data`, each item with its input's `index` and `embedding`."""

    provider: ClassVar[str] = "openai"

    base_url: str
    api_key: str
    model: str
    dimensions: int
    timeout: float

    @classmethod
    def from_settings(cls) -> OpenAIEmbedder:
        return cls(
            settings.OPENAI_BASE_URL,
            settings.OPENAI_API_KEY,
            settings.MEMORY_EMBEDDING_MODEL,
            settings.MEMORY_EMBEDDING_DIMENSIONS,
            settings.MEMORY_EMBED_TIMEOUT_SECONDS,
        )

    def embed(self, texts: list[str]) -> list[np.ndarray]:
        body = post_json(
            f"{self.base_url.rstrip('/')}/embeddings",
            {"model": self.model, "input": texts},
            timeout=self.timeout,
            headers=_auth(self.api_key),
            vectors=True,
        )
        data = body.get("data")
        if not isinstance(data, list):
            raise ProviderError("/v1/embeddings answer has no 'data' list")
        ordered = sorted(
            data, key=lambda item: item.get("index", 0) if isinstance(item, dict) else 0
        )
        return unit_rows([item.get("embedding") for item in ordered], len(texts), self.dimensions)
