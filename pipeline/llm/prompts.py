"""What the model is asked: the extraction and decision prompts, the JSON schemas sent with them
(Ollama `format`, OpenAI `response_format`) and PROMPT_VERSION, recorded with every proposal."""

from __future__ import annotations

from pipeline.parsing import ACTIONS, ENTITY_TYPES, FACT_TYPES, Candidate, Fact

# Bump when a prompt or schema changes, so analytics can tell decisions made under each apart.
PROMPT_VERSION = "v2"  # v2: "none" names the candidate it matches (targetId)

_CONFIDENCE_SCHEMA = {"type": "number", "minimum": 0, "maximum": 1}
EXTRACTION_SCHEMA = {
    "type": "object",
    "properties": {
        "facts": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "content": {"type": "string"},
                    "type": {"type": "string", "enum": list(FACT_TYPES)},
                    "confidence": _CONFIDENCE_SCHEMA,
                },
                "required": ["content", "type", "confidence"],
            },
        },
        "entities": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "source": {"type": "string"},
                    "source_type": {"type": "string"},
                    "relationship": {"type": "string"},
                    "target": {"type": "string"},
                    "target_type": {"type": "string"},
                    "confidence": _CONFIDENCE_SCHEMA,
                },
                "required": ["source", "relationship", "target"],
            },
        },
    },
    "required": ["facts", "entities"],
}
DECISION_SCHEMA = {
    "type": "object",
    "properties": {
        "action": {"type": "string", "enum": list(ACTIONS)},
        "targetId": {"type": ["string", "null"]},
        "confidence": _CONFIDENCE_SCHEMA,
        "reason": {"type": "string"},
    },
    "required": ["action", "targetId", "confidence", "reason"],
}

_EXTRACTION_INSTRUCTIONS = """\
Read the text below and pull out the durable knowledge in it as separate facts, plus the
relationships between named things.

Each fact must be atomic and self-contained: one piece of information that a reader understands
without the original conversation. Name the concrete subject (the person, project, package, file
path, service or tool) instead of "it", "this" or "the project".
  Poor: "It should use the new one."
  Good: "The billing service should use PostgreSQL 16 instead of MySQL."

Fact types:
- fact: something that is true about the world or the project.
- preference: what someone likes, dislikes or wants.
- decision: a choice that was made, such as adopting or dropping a tool.
- procedural: how to do something: steps, commands, a workflow.
- semantic: a definition or meaning of a term or concept.

Confidence is a number from 0 to 1: how clearly the text states the fact (lower it for hedged
or speculative statements).

Entities are triples (source, relationship, target) with a confidence; give each end a type:
ENTITY_TYPES.

Skip greetings, small talk and details that will not matter later. Return ONLY a JSON object:
{"facts": [{"content": "...", "type": "fact", "confidence": 0.9}],
 "entities": [{"source": "...", "source_type": "person", "relationship": "...", "target": "...",
 "target_type": "tool", "confidence": 0.8}]}

Text:
"""

_DECISION_INSTRUCTIONS = """\
You maintain a long-term memory store. Decide what to do with a newly extracted fact, given the
most similar memories already stored (the candidates).

Actions:
- add: no candidate covers this fact; store it as a new memory.
- update: the fact supersedes or refines one candidate, whose text is replaced by the fact (so
  the fact must stand on its own). Give that candidate as targetId.
- delete: the fact contradicts or invalidates one candidate, which should be removed. Give that
  candidate as targetId.
- none: a candidate already says this; change nothing. Give that candidate as targetId.
"""

_DECISION_ANSWER = """\
targetId is the candidate's number (for example 2) or its ID; use null for add.
Return ONLY a JSON object: {"action": "add|update|delete|none", "targetId": ...,
"confidence": 0.0-1.0, "reason": "one sentence"}
"""


def format_candidates(candidates: list[Candidate]) -> str:
    return "\n\n".join(
        f"[{c.number}] ID: {c.memory_id}\nType: {c.type}\nContent: {c.content}" for c in candidates
    )


def extraction_prompt(text: str) -> str:
    """The extraction prompt; `text` should already have been through prepare_input."""
    return _EXTRACTION_INSTRUCTIONS.replace("ENTITY_TYPES", ", ".join(ENTITY_TYPES)) + text


def format_counter_examples(examples: list[dict]) -> str:
    """Recent proposals reviewers rejected, so the model does not repeat them."""
    lines = []
    for example in examples:
        target = f' on "{example["target"]}"' if example.get("target") else ""
        note = f' (reviewer: "{example["note"]}")' if example.get("note") else ""
        lines.append(
            f'- {example["action"].upper()} "{example["fact"]}"{target} was rejected{note}'
        )
    return "\n".join(lines)


def decision_prompt(
    fact: Fact, candidates: list[Candidate], examples: list[dict] | None = None
) -> str:
    rejected = ""
    if examples:
        rejected = (
            "Reviewers rejected these earlier proposals; do not propose the same kind of change:\n"
            f"{format_counter_examples(examples)}\n\n"
        )
    return (
        f"{_DECISION_INSTRUCTIONS}\n"
        f"{rejected}"
        f'New fact (type: {fact.type}, confidence: {fact.confidence:.2f}):\n"{fact.content}"\n\n'
        f"Candidates:\n{format_candidates(candidates)}\n\n"
        f"{_DECISION_ANSWER}"
    )
