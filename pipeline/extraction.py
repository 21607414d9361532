"""Extraction step: one model call turns a raw memory into validated facts and entity triples."""

from __future__ import annotations

from dataclasses import dataclass, field

from pipeline import parsing
from pipeline.llm import CallRecord, ChatClient
from pipeline.parsing import EntityTriple, Fact


@dataclass
class Extraction:
    facts: list[Fact]
    entities: list[EntityTriple]
    warnings: list[str] = field(default_factory=list)
    call: CallRecord | None = None


def extract(client: ChatClient, text: str) -> Extraction:
    """Prepare the input (truncation), call the model, parse tolerantly. Provider errors propagate."""
    prepared, warnings = parsing.prepare_input(text)
    call = client.extract(prepared)
    facts, entities, parse_warnings = parsing.parse_extraction(call.raw_response)
    return Extraction(facts, entities, warnings + parse_warnings, call)
