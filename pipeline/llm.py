"""The only module that talks to a language model (Ollama, OpenAI-compatible, offline). No database.

Each call returns the reply text with what the model saw (prompt), timings and token counts, so the
caller can log it; every provider failure raises pipeline.embedders.ProviderError.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Protocol

from django.conf import settings

from memory.guard import ensure_outside_transaction
from pipeline import offline, parsing
from pipeline.embedders import ProviderError, post_json, resolve_provider
from pipeline.parsing import Candidate, Fact

OFFLINE_MODEL = "offline-heuristic-v1"


@dataclass
class CallRecord:
    """One model call as the job log stores it."""

    kind: str
    provider: str
    model: str
    prompt: str
    raw_response: str = ""
    duration_ms: float = 0.0
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    error: str | None = None
    fact_index: int | None = None

    def as_dict(self) -> dict:
        return asdict(self)


class ChatClient(Protocol):
    provider: str
    model: str

    def extract(self, text: str) -> CallRecord: ...

    def decide(
        self,
        fact: Fact,
        candidates: list[Candidate],
        similarities: dict[str, float],
        examples: list[dict] | None = None,
    ) -> CallRecord: ...


class _HttpChat:
    provider = ""

    def __init__(self, model: str, timeout: float):
        self.model = model
        self.timeout = timeout

    def _complete(self, prompt: str, schema: dict, kind: str) -> CallRecord:
        record = CallRecord(kind=kind, provider=self.provider, model=self.model, prompt=prompt)
        started = time.perf_counter()
        try:
            text, prompt_tokens, completion_tokens = self._send(prompt, schema, kind)
            if not text or not text.strip():
                raise ProviderError(f"{self.provider} model {self.model} returned an empty reply")
        except ProviderError as exc:
            # The failed call travels with the error so the job log still shows what was sent.
            record.error = str(exc)
            exc.call = record
            raise
        finally:
            record.duration_ms = (time.perf_counter() - started) * 1000
        record.raw_response = text
        record.prompt_tokens, record.completion_tokens = prompt_tokens, completion_tokens
        return record

    def _send(self, prompt: str, schema: dict, kind: str) -> tuple[str, int | None, int | None]:
        raise NotImplementedError

    def extract(self, text: str) -> CallRecord:
        return self._complete(parsing.extraction_prompt(text), parsing.EXTRACTION_SCHEMA, "extract")

    def decide(
        self,
        fact: Fact,
        candidates: list[Candidate],
        similarities: dict[str, float],
        examples: list[dict] | None = None,
    ) -> CallRecord:
        return self._complete(
            parsing.decision_prompt(fact, candidates, examples), parsing.DECISION_SCHEMA, "decide"
        )


class OllamaChat(_HttpChat):
    """POST /api/chat, stream false, `format` = the JSON schema of the expected object, temperature 0."""

    provider = "ollama"

    def __init__(self, base_url: str, model: str, timeout: float):
        super().__init__(model, timeout)
        self.base_url = base_url.rstrip("/")

    def _send(self, prompt: str, schema: dict, kind: str):
        body = post_json(
            f"{self.base_url}/api/chat",
            {
                "model": self.model,
                "messages": [{"role": "user", "content": prompt}],
                "stream": False,
                "format": schema,
                "options": {"temperature": 0},
            },
            timeout=self.timeout,
        )
        message = body.get("message")
        if not isinstance(message, dict) or not isinstance(message.get("content"), str):
            raise ProviderError("Ollama /api/chat answer has no message content")
        return message["content"], _int(body.get("prompt_eval_count")), _int(body.get("eval_count"))


class OpenAIChat(_HttpChat):
    """POST /v1/chat/completions with a json_schema response format, temperature 0."""

    provider = "openai"

    def __init__(self, base_url: str, api_key: str, model: str, timeout: float):
        super().__init__(model, timeout)
        self.base_url, self.api_key = base_url.rstrip("/"), api_key

    def _send(self, prompt: str, schema: dict, kind: str):
        body = post_json(
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
            timeout=self.timeout,
            headers={"Authorization": f"Bearer {self.api_key}"} if self.api_key else None,
        )
        try:
            content = body["choices"][0]["message"]["content"]
        except (KeyError, IndexError, TypeError) as exc:
            raise ProviderError("chat completion answer has no choices[0].message.content") from exc
        usage = body.get("usage") if isinstance(body.get("usage"), dict) else {}
        return content, _int(usage.get("prompt_tokens")), _int(usage.get("completion_tokens"))


class OfflineChat:
    """Deterministic heuristics answering in the same JSON a model would, through the same parser."""

    provider = "offline"
    model = OFFLINE_MODEL

    def _record(self, kind: str, prompt: str, reply_fn) -> CallRecord:
        ensure_outside_transaction("offline model")
        started = time.perf_counter()
        reply = reply_fn()
        return CallRecord(
            kind=kind,
            provider=self.provider,
            model=self.model,
            prompt=prompt,
            raw_response=reply,
            duration_ms=(time.perf_counter() - started) * 1000,
        )

    def extract(self, text: str) -> CallRecord:
        return self._record(
            "extract", parsing.extraction_prompt(text), lambda: offline.extract_reply(text)
        )

    def decide(
        self,
        fact: Fact,
        candidates: list[Candidate],
        similarities: dict[str, float],
        examples: list[dict] | None = None,
    ) -> CallRecord:
        return self._record(
            "decide",
            parsing.decision_prompt(fact, candidates, examples),
            lambda: offline.decide_reply(fact, candidates, similarities),
        )


def _int(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def get_chat_client(provider: str | None = None, model: str | None = None) -> ChatClient:
    """The configured chat client; 'auto' resolves to Ollama when it answers, else offline."""
    provider = resolve_provider(provider)
    timeout = settings.MEMORY_LLM_TIMEOUT_SECONDS
    if provider == "ollama":
        return OllamaChat(settings.OLLAMA_URL, model or settings.MEMORY_EXTRACTION_MODEL, timeout)
    if provider == "openai":
        return OpenAIChat(
            settings.OPENAI_BASE_URL,
            settings.OPENAI_API_KEY,
            model or settings.MEMORY_EXTRACTION_MODEL,
            timeout,
        )
    return OfflineChat()
