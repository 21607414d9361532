"""Tolerant parsing and validation of model replies; never raises, every problem is a warning."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass

from memory import linker

MAX_INPUT_CHARS = 12000
MAX_FACTS = 20
MIN_FACT_CHARS = 10
MAX_FACT_CHARS = 2000
MAX_ENTITIES = 50
EXTRACTION_LIMITS = {
    "MAX_INPUT_CHARS": MAX_INPUT_CHARS,
    "MAX_FACTS": MAX_FACTS,
    "MIN_FACT_CHARS": MIN_FACT_CHARS,
    "MAX_FACT_CHARS": MAX_FACT_CHARS,
    "MAX_ENTITIES": MAX_ENTITIES,
}
FACT_TYPES = ("fact", "preference", "decision", "procedural", "semantic")
ENTITY_TYPES = ("person", "project", "system", "tool", "concept", "skill", "task", "unknown")
ACTIONS = ("add", "update", "delete", "none")

PARSE_FAILED = "Failed to parse model output as JSON"
NOT_AN_OBJECT = "Model output is not an object"

_WHITESPACE = re.compile(r"\s+")
_NON_SPACE = re.compile(r"\S")
_TRAILING_COMMA = re.compile(r",\s*[}\]]")
_THINK_BLOCK = re.compile(r"<think\b[^>]*>.*?</think\s*>\s*", re.IGNORECASE | re.DOTALL)
_THINK_OPEN = re.compile(r"<think\b[^>]*>", re.IGNORECASE)
_THINK_CLOSE = re.compile(r"</think\s*>", re.IGNORECASE)
# A fence may carry a language tag ("json", "JSON", "javascript") and may be left unclosed.
_FENCE = re.compile(r"```[ \t]*[A-Za-z0-9_-]*[ \t]*\r?\n?(.*?)(?:```|\Z)", re.DOTALL)
# Bounds the parse attempts on pathological replies (thousands of small objects).
_MAX_OBJECTS = 20


def _collapse(text: str) -> str:
    return _WHITESPACE.sub(" ", text).strip()


def _small_int(value: object) -> bool:
    # str() of an int beyond 4,300 digits raises, so only small ones are printed.
    return isinstance(value, int) and value.bit_length() < 64


def _shorten(value: object, limit: int = 60) -> str:
    """A short printable form of a model-supplied value for a warning."""
    if isinstance(value, str):
        text = value
    elif value is None or isinstance(value, bool | float) or _small_int(value):
        text = str(value)
    else:
        text = type(value).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


def prepare_input(text: str) -> tuple[str, list[str]]:
    """Collapse whitespace; cut input over MAX_INPUT_CHARS and mark the cut."""
    if not isinstance(text, str):
        text = "" if text is None else str(text)
    text = _collapse(text)
    if len(text) <= MAX_INPUT_CHARS:
        return text, []
    warning = f"Input truncated from {len(text)} to {MAX_INPUT_CHARS} chars"
    return text[:MAX_INPUT_CHARS] + "\n[truncated]", [warning]


# --- JSON recovery -------------------------------------------------------------------------


def _strip_think(text: str) -> str:
    text = _THINK_BLOCK.sub("", text)
    # A lone closing tag means the chat template opened the block inside the prompt (Qwen3 does
    # this), so everything before it is reasoning.
    closes = list(_THINK_CLOSE.finditer(text))
    if closes:
        text = text[closes[-1].end() :]
    # An unclosed opening tag: the reasoning never ended, so the answer (if any) can only start
    # at the first brace after it.
    opened = _THINK_OPEN.search(text)
    if opened:
        brace = text.find("{", opened.end())
        text = text[: opened.start()] + (text[brace:] if brace >= 0 else "")
    return text.strip()


def _balanced_objects(text: str) -> list[str]:
    """Outermost balanced {...} spans in order, found in one string- and escape-aware pass.

    Text outside any object is prose, so quotes there are ignored. When an object never closes
    (a reply cut off mid-way), the complete objects inside it are returned instead.
    """
    spans: list[tuple[int, int]] = []
    stack: list[int] = []
    in_string = escaped = False
    for i, ch in enumerate(text):
        if not stack:
            if ch == "{":
                stack.append(i)
        elif in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch == "{":
            stack.append(i)
        elif ch == "}":
            spans.append((stack.pop(), i + 1))
    found, covered_to = [], -1
    for start, end in sorted(spans):
        if start >= covered_to:
            found.append(text[start:end])
            covered_to = end
    return found[:_MAX_OBJECTS]


def _remove_trailing_commas(text: str) -> str:
    """Drop commas directly before } or ] outside strings (a common model slip)."""
    if not _TRAILING_COMMA.search(text):
        return text
    out, in_string, escaped = [], False, False
    for i, ch in enumerate(text):
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch == ",":
            following = _NON_SPACE.search(text, i + 1)
            if following and following.group() in "}]":
                continue
        out.append(ch)
    return "".join(out)


_NOTHING = object()


def _loads(text: str) -> object:
    """json.loads, then without trailing commas; _NOTHING when neither works."""
    for attempt in (text, None):
        if attempt is None:
            attempt = _remove_trailing_commas(text)
            if attempt == text:
                break
        try:
            return json.loads(attempt)
        # ValueError covers bad JSON and ints over the digit limit; RecursionError deep nesting.
        except (ValueError, RecursionError):
            continue
    return _NOTHING


def _parse_candidate(text: str) -> object:
    value = _loads(text)
    if isinstance(value, str):
        # Double-encoded output: the object arrived as a JSON string.
        inner = _loads(value.strip())
        if inner is not _NOTHING:
            value = inner
    return value


def _candidates(raw: str) -> Iterator[str]:
    """Texts to try, most specific first; lazy because a clean reply needs only the first."""
    unthought = _strip_think(raw)
    fenced = _FENCE.search(unthought)
    text = fenced.group(1).strip() if fenced else unthought
    yield text
    yield from _balanced_objects(text)
    if fenced:
        yield from _balanced_objects(unthought)
    yield from _balanced_objects(raw)


def parse_json_object(raw: str) -> tuple[dict | None, list[str]]:
    """Recover the JSON object in a model reply despite think blocks, fences, prose and slips."""
    if isinstance(raw, bytes | bytearray):
        raw = bytes(raw).decode("utf-8", errors="replace")
    if not isinstance(raw, str):
        return None, [PARSE_FAILED]
    parsed_something, seen = False, set()
    for candidate in _candidates(raw):
        if not candidate or candidate in seen:
            continue
        seen.add(candidate)
        value = _parse_candidate(candidate)
        if isinstance(value, dict):
            return value, []
        parsed_something = parsed_something or value is not _NOTHING
    return None, [NOT_AN_OBJECT if parsed_something else PARSE_FAILED]


# --- Extraction ----------------------------------------------------------------------------


@dataclass
class Fact:
    content: str
    type: str
    confidence: float

    def as_dict(self) -> dict:
        return {"content": self.content, "type": self.type, "confidence": self.confidence}


@dataclass
class EntityTriple:
    source: str
    source_type: str
    relationship: str
    target: str
    target_type: str
    confidence: float

    def as_dict(self) -> dict:
        return {
            "source": self.source,
            "sourceType": self.source_type,
            "relationship": self.relationship,
            "target": self.target,
            "targetType": self.target_type,
            "confidence": self.confidence,
        }


DEFAULT_CONFIDENCE = 0.5


def _as_number(value: object) -> tuple[int | float | None, bool]:
    """(the number a confidence value names, whether it was a percentage); None if it names none.
    bool is an int subclass, but "true" is not a confidence."""
    if isinstance(value, bool):
        return None, False
    if isinstance(value, int | float):
        return value, False
    if not isinstance(value, str):
        return None, False
    text = value.strip()
    percent = text.endswith("%")
    try:
        number = float(text.rstrip("%").strip())
    except ValueError:
        return None, False
    return number, percent


def _confidence(value: object, warnings: list[str], label: str, *, required: bool) -> float:
    """A confidence in [0, 1]. Never a silent coercion: a number given as text is read with a
    warning, a whole number from 2 to 100 (or "95%") is read as a percentage with a warning, and
    anything else out of range falls back to 0.5 with a warning, never clamped to 1.0."""
    if value is None:
        if required:
            warnings.append(f"{label}: confidence missing, using {DEFAULT_CONFIDENCE}")
        return DEFAULT_CONFIDENCE
    number, percent = _as_number(value)
    shown = _shorten(value)
    if number is None or (isinstance(number, float) and not math.isfinite(number)):
        warnings.append(
            f'{label}: confidence "{shown}" is not a number, using {DEFAULT_CONFIDENCE}'
        )
        return DEFAULT_CONFIDENCE
    # Compare before float(): an enormous JSON integer cannot be converted.
    whole = isinstance(number, int) or number.is_integer()
    if percent or (1 < number <= 100 and whole):
        if not 0 <= number <= 100:
            warnings.append(
                f'{label}: confidence "{shown}" is out of range, using {DEFAULT_CONFIDENCE}'
            )
            return DEFAULT_CONFIDENCE
        read = round(float(number) / 100, 4)
        warnings.append(f'{label}: confidence "{shown}" read as a percentage ({read})')
        return read
    if not 0 <= number <= 1:
        warnings.append(
            f'{label}: confidence "{shown}" is out of range, using {DEFAULT_CONFIDENCE}'
        )
        return DEFAULT_CONFIDENCE
    if isinstance(value, str):
        warnings.append(f'{label}: confidence given as text "{shown}", read as {float(number)}')
    return float(number)


def _text(value: object) -> str:
    return _collapse(value) if isinstance(value, str) else ""


def _list_field(obj: dict, key: str, warnings: list[str]) -> list:
    value = obj.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        warnings.append(f'"{key}" is not a list')
        return []
    return value


def _validate_fact(item: object, warnings: list[str]) -> Fact | None:
    if not isinstance(item, dict):
        warnings.append("Fact is not an object")
        return None
    if not isinstance(item.get("content"), str):
        warnings.append("Fact missing content string")
        return None
    content = _collapse(item["content"])
    if len(content) < MIN_FACT_CHARS:
        warnings.append(f'Fact too short ({len(content)} chars): "{content}"')
        return None
    if len(content) > MAX_FACT_CHARS:
        warnings.append(f"Fact truncated from {len(content)} chars")
        content = content[:MAX_FACT_CHARS].rstrip()
    raw_type = item.get("type")
    fact_type = raw_type.strip().lower() if isinstance(raw_type, str) else ""
    if fact_type not in FACT_TYPES:
        warnings.append(f'Invalid type "{_shorten(raw_type)}", defaulting to "fact"')
        fact_type = "fact"
    label = f'Fact "{_shorten(content, 40)}"'
    confidence = _confidence(item.get("confidence"), warnings, label, required=True)
    return Fact(content, fact_type, confidence)


def _entity_type(item: dict, snake: str, camel: str) -> str:
    value = _text(item.get(snake, item.get(camel))).lower()
    return value or "unknown"


def _validate_entity(item: object, warnings: list[str]) -> EntityTriple | None:
    if not isinstance(item, dict):
        warnings.append("Entity is not an object")
        return None
    source, target = _text(item.get("source")), _text(item.get("target"))
    if not source or not target:
        warnings.append("Entity missing source or target")
        return None
    relationship = _text(item.get("relationship"))
    if not relationship:
        warnings.append("Entity missing relationship")
        return None
    label = f'Entity "{_shorten(f"{source} {relationship} {target}", 40)}"'
    if linker.is_erasure_marker(source) or linker.is_erasure_marker(target):
        warnings.append(f"{label} names an erased text's marker, not a name: dropped")
        return None
    return EntityTriple(
        source,
        _entity_type(item, "source_type", "sourceType"),
        relationship,
        target,
        _entity_type(item, "target_type", "targetType"),
        _confidence(item.get("confidence"), warnings, label, required=False),
    )


def validate_extraction(obj: dict | None) -> tuple[list[Fact], list[EntityTriple], list[str]]:
    """Apply every extraction limit; invalid items are dropped with a warning each."""
    if obj is None:
        return [], [], []  # parse_json_object already said why.
    if not isinstance(obj, dict):
        return [], [], [NOT_AN_OBJECT]
    warnings: list[str] = []
    if "facts" not in obj and "entities" not in obj:
        # Typically a reply cut off mid-way, recovered as one inner object: say so, not just "0 facts".
        warnings.append('Model output has no "facts" or "entities"')
    raw_facts = _list_field(obj, "facts", warnings)
    if len(raw_facts) > MAX_FACTS:
        warnings.append(f"Truncated facts from {len(raw_facts)} to {MAX_FACTS}")
    facts = [f for f in (_validate_fact(i, warnings) for i in raw_facts[:MAX_FACTS]) if f]
    raw_entities = _list_field(obj, "entities", warnings)
    if len(raw_entities) > MAX_ENTITIES:
        warnings.append(f"Truncated entities from {len(raw_entities)} to {MAX_ENTITIES}")
    entities = [
        e for e in (_validate_entity(i, warnings) for i in raw_entities[:MAX_ENTITIES]) if e
    ]
    return facts, entities, warnings


def parse_extraction(raw: str) -> tuple[list[Fact], list[EntityTriple], list[str]]:
    obj, warnings = parse_json_object(raw)
    facts, entities, more = validate_extraction(obj)
    return facts, entities, warnings + more


# --- Decision ------------------------------------------------------------------------------


@dataclass
class Candidate:
    number: int
    memory_id: str
    content: str
    type: str = "fact"


@dataclass
class Decision:
    action: str
    target_id: str | None
    confidence: float
    reason: str


_MISSING = object()


def _raw_target(obj: dict) -> object:
    for key in ("targetId", "target_id", "targetID", "target"):
        if obj.get(key) is not None:
            return obj[key]
    return _MISSING


def _resolve_target(value: object, candidates: list[Candidate]) -> str | None:
    """The memory id a target names, by candidate number (2, "2", "[2]") or by memory id."""
    number: int | None = None
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, float) and value.is_integer():
        number = int(value)
    elif isinstance(value, str):
        text = value.strip()
        for candidate in candidates:
            if str(candidate.memory_id).lower() == text.lower():
                return candidate.memory_id
        bare = text.strip("[]# ").strip()
        if bare.isdecimal() and len(bare) < 10:
            number = int(bare)
    if number is not None:
        for candidate in candidates:
            if candidate.number == number:
                return candidate.memory_id
    return None


def parse_decision(raw: str, candidates: list[Candidate]) -> tuple[Decision | None, list[str]]:
    """A usable decision, or None with the warning that explains why it was dropped."""
    candidates = [c for c in (candidates or []) if isinstance(c, Candidate)]
    obj, warnings = parse_json_object(raw)
    if obj is None:
        return None, warnings
    raw_action = obj.get("action")
    action = raw_action.strip().lower() if isinstance(raw_action, str) else ""
    if action not in ACTIONS:
        return None, [*warnings, f'Invalid action: "{_shorten(raw_action)}"']
    target_id = None
    if action in ("update", "delete"):
        raw_target = _raw_target(obj)
        if raw_target is _MISSING or (isinstance(raw_target, str) and not raw_target.strip()):
            return None, [*warnings, f"{action} decision missing targetId"]
        target_id = _resolve_target(raw_target, candidates)
        if target_id is None:
            return None, [
                *warnings,
                f'Decision references non-candidate ID: "{_shorten(raw_target)}"',
            ]
    elif action == "none":
        # The memory that already says it, when the model named a candidate (else no target).
        raw_target = _raw_target(obj)
        if raw_target is not _MISSING:
            target_id = _resolve_target(raw_target, candidates)
    reason = obj.get("reason")
    if not isinstance(reason, str) or not reason.strip():
        return None, [*warnings, "Decision missing reason"]
    warnings = list(warnings)
    confidence = _confidence(obj.get("confidence"), warnings, "Decision", required=True)
    return Decision(action, target_id, confidence, reason.strip()), warnings
