"""What every model client shares: the call record the job log stores, the chat and embedder
interfaces, and the timed HTTP chat call that attaches the failed call to its ProviderError."""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import ClassVar, Protocol

import numpy as np

from pipeline.llm import prompts
from pipeline.llm.transport import ProviderError
from pipeline.parsing import Candidate, Fact


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


class Embedder(Protocol):
    provider: ClassVar[str]
    model: str
    dimensions: int

    def embed(self, texts: list[str]) -> list[np.ndarray]: ...


class HttpChat:
    """A chat client whose provider module only says how to send one prompt (`_send`)."""

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
        """(reply text, prompt tokens, completion tokens) for one prompt and its JSON schema."""
        raise NotImplementedError

    def extract(self, text: str) -> CallRecord:
        return self._complete(prompts.extraction_prompt(text), prompts.EXTRACTION_SCHEMA, "extract")

    def decide(
        self,
        fact: Fact,
        candidates: list[Candidate],
        similarities: dict[str, float],
        examples: list[dict] | None = None,
    ) -> CallRecord:
        return self._complete(
            prompts.decision_prompt(fact, candidates, examples), prompts.DECISION_SCHEMA, "decide"
        )


def token_count(value: object) -> int | None:
    """A token count from a provider's answer, or None when it gave none (or nonsense)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def unit_rows(vectors: list, expected: int) -> list[np.ndarray]:
    """The server's vectors as L2-normalised float32 rows, refusing malformed or missing ones."""
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
