"""What every model client shares: the call record the job log stores, the chat and embedder
interfaces, and the timed HTTP chat calls (one, or many side by side) that attach a failed call
to its ProviderError."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import ClassVar, Protocol

import numpy as np

from pipeline.llm import prompts
from pipeline.llm.transport import Post, ProviderError, post_json, post_json_each
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
    """A chat client whose provider module only says how to ask (`_post`: the request for one
    prompt) and how to read the answer (`_read`); sending, timing and logging are shared here,
    one call at a time or many side by side."""

    provider = ""

    def __init__(self, model: str, timeout: float):
        self.model = model
        self.timeout = timeout

    def _post(self, prompt: str, schema: dict, kind: str) -> Post:
        """The POST that asks the model `prompt`, its reply shaped by the JSON `schema`."""
        raise NotImplementedError

    def _read(self, body: dict) -> tuple[str, int | None, int | None]:
        """(reply text, prompt tokens, completion tokens) from the server's decoded answer;
        ProviderError when the answer has no reply."""
        raise NotImplementedError

    def _recorded(self, record: CallRecord, answer: dict | ProviderError) -> CallRecord:
        """The record with the reply, or the ProviderError raised with the record attached (the
        job log still shows what was sent)."""
        try:
            if isinstance(answer, ProviderError):
                raise answer
            text, prompt_tokens, completion_tokens = self._read(answer)
            if not text or not text.strip():
                raise ProviderError(f"{self.provider} model {self.model} returned an empty reply")
        except ProviderError as exc:
            record.error = str(exc)
            exc.call = record
            raise
        record.raw_response = text
        record.prompt_tokens, record.completion_tokens = prompt_tokens, completion_tokens
        return record

    def _complete(self, prompt: str, schema: dict, kind: str) -> CallRecord:
        record = CallRecord(kind=kind, provider=self.provider, model=self.model, prompt=prompt)
        post = self._post(prompt, schema, kind)
        started = time.perf_counter()
        try:
            answer = post_json(post.url, post.payload, timeout=post.timeout, headers=post.headers)
        except ProviderError as exc:
            answer = exc
        record.duration_ms = (time.perf_counter() - started) * 1000
        return self._recorded(record, answer)

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

    def decide_each(
        self,
        asks: list[tuple[int, Fact, list[Candidate]]],
        examples: list[dict] | None = None,
        *,
        parallel: int,
    ) -> Iterator[tuple[int, CallRecord]]:
        """`decide` for every (fact index, fact, candidates), side by side on the transport's
        event loop, at most `parallel` at a time: (fact index, record) as each answers. The first
        failure raises (its record attached) and the calls not answered yet are dropped."""
        records = [
            CallRecord(
                kind="decide",
                provider=self.provider,
                model=self.model,
                prompt=prompts.decision_prompt(fact, candidates, examples),
                fact_index=index,
            )
            for index, fact, candidates in asks
        ]
        posts = [self._post(r.prompt, prompts.DECISION_SCHEMA, "decide") for r in records]
        answers = post_json_each(posts, parallel=parallel, lane="decide")
        try:
            for position, answer, elapsed_ms in answers:
                record = records[position]
                record.duration_ms = elapsed_ms
                yield record.fact_index, self._recorded(record, answer)
        finally:
            answers.close()


def token_count(value: object) -> int | None:
    """A token count from a provider's answer, or None when it gave none (or nonsense)."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def unit_rows(vectors: list, expected: int, dimensions: int) -> list[np.ndarray]:
    """The server's vectors as L2-normalised float32 rows, refusing malformed or missing ones and
    any of another size than the store's (a QA pass: a 384-dimensional model's vectors were
    stored, never searched, and the memory never embedded again)."""
    rows = []
    for vector in vectors:
        array = np.asarray(vector, dtype=np.float32)
        if array.ndim != 1 or array.size == 0 or not np.all(np.isfinite(array)):
            raise ProviderError("embedding server returned a malformed vector")
        norm = float(np.linalg.norm(array))
        rows.append(array / norm if norm > 0 else array)
    if len(rows) != expected:
        raise ProviderError(f"embedding server returned {len(rows)} vectors for {expected} inputs")
    if sizes := sorted({row.size for row in rows} - {dimensions}):
        raise ProviderError(
            f"embedding server returned vectors of {sizes[0]} dimensions; the store holds "
            f"{dimensions} (MEMORY_EMBEDDING_DIMENSIONS): use the embedding model the store was "
            "made with, or change the setting and re-embed"
        )
    return rows
