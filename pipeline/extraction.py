"""Extraction step: one model call turns a raw memory into validated facts and entity triples.

Input too short to hold a fact skips the call; a reply with no JSON object in it is a failed
attempt (UnusableReply, a ProviderError carrying the call), so the job retries and ends dead
with the raw reply in its call log instead of completing with 0 facts."""

from __future__ import annotations

from dataclasses import dataclass, field

from pipeline import parsing
from pipeline.llm import CallRecord, ChatClient, ProviderError
from pipeline.parsing import EntityTriple, Fact

# Text shorter than the shortest valid fact cannot yield one: no model call is worth making.
MIN_INPUT_CHARS = parsing.MIN_FACT_CHARS
TOO_SHORT = f"Input too short (< {MIN_INPUT_CHARS} chars)"


class UnusableReply(ProviderError):
    """The model answered, but with no JSON object to read facts from."""

    def __init__(self, message: str, call: CallRecord):
        super().__init__(message)
        call.error = message
        self.call = call


@dataclass
class Extraction:
    facts: list[Fact]
    entities: list[EntityTriple]
    warnings: list[str] = field(default_factory=list)
    call: CallRecord | None = None


def extract(client: ChatClient, text: str) -> Extraction:
    """Prepare the input (truncation), call the model, parse tolerantly.

    Provider errors propagate, and so does UnusableReply; invalid items inside a readable reply
    are dropped with a warning each."""
    prepared, warnings = parsing.prepare_input(text)
    if len(prepared) < MIN_INPUT_CHARS:
        return Extraction([], [], [*warnings, TOO_SHORT])
    call = client.extract(prepared)
    obj, parse_warnings = parsing.parse_json_object(call.raw_response)
    if obj is None:
        # The whole reply is in the call log; the job's error shows how it starts.
        start = call.raw_response[:200]
        raise UnusableReply(f"{'; '.join(parse_warnings)}: {start!r}", call)
    facts, entities, more = parsing.validate_extraction(obj)
    return Extraction(facts, entities, warnings + parse_warnings + more, call)
