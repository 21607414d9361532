"""The evaluation case format: JSON Lines, one case per line, `#` lines are comments. Two kinds,
decision and extraction, validated strictly; every problem is a CaseError naming its line."""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from pipeline.parsing import ACTIONS, FACT_TYPES

SHIPPED = "shipped.jsonl"
DESTRUCTIVE_ACTIONS = ("update", "delete")
# Enough errors to fix a file in one pass without drowning the first one.
MAX_ERRORS = 20

_TOP = {"id", "kind", "category"}
_DECISION = _TOP | {"fact", "candidates", "expect"}
_EXTRACTION = _TOP | {"raw", "expect"}
_FACT = {"content", "type", "confidence"}
_CANDIDATE = {"id", "content", "type", "pinned", "score"}
_DECISION_EXPECT = {"action", "notAction", "target", "reviewNeeded"}
_EXTRACTION_EXPECT = {"facts", "forbidden", "maxFacts"}


class CaseError(ValueError):
    """A case file that cannot be used; the message names every bad line (up to MAX_ERRORS)."""


@dataclass(frozen=True)
class CaseCandidate:
    id: str
    content: str
    type: str = "fact"
    pinned: bool = False
    score: float | None = None  # the search score a job gave it; None: computed (see run.py)


@dataclass(frozen=True)
class DecisionCase:
    id: str
    category: str
    fact_content: str
    fact_type: str
    fact_confidence: float
    candidates: tuple[CaseCandidate, ...]
    action: str | None  # expected action, or None when the case holds a rejected `not_action`
    not_action: str | None = None
    target: str | None = None
    review_needed: bool | None = None
    line: int = 0
    kind: str = "decision"

    def expect(self) -> dict:
        """The case's `expect` as the file states it."""
        found: dict = {}
        if self.action is not None:
            found["action"] = self.action
        if self.not_action is not None:
            found["notAction"] = self.not_action
        if self.target is not None:
            found["target"] = self.target
        if self.review_needed is not None:
            found["reviewNeeded"] = self.review_needed
        return found

    def as_json(self) -> dict:
        """The case as one line of the format (the inverse of parsing it)."""
        candidates = []
        for c in self.candidates:
            item = {"id": c.id, "content": c.content, "type": c.type, "pinned": c.pinned}
            if c.score is not None:
                item["score"] = c.score
            candidates.append(item)
        return {
            "id": self.id,
            "kind": "decision",
            "category": self.category,
            "fact": {
                "content": self.fact_content,
                "type": self.fact_type,
                "confidence": self.fact_confidence,
            },
            "candidates": candidates,
            "expect": self.expect(),
        }


@dataclass(frozen=True)
class ExtractionCase:
    id: str
    category: str
    raw: str
    facts: tuple[str, ...] = ()
    forbidden: tuple[str, ...] = ()
    max_facts: int | None = None
    line: int = 0
    kind: str = "extraction"

    def expect(self) -> dict:
        found: dict = {}
        if self.facts:
            found["facts"] = list(self.facts)
        if self.forbidden:
            found["forbidden"] = list(self.forbidden)
        if self.max_facts is not None:
            found["maxFacts"] = self.max_facts
        return found

    def as_json(self) -> dict:
        """The case as one line of the format (the inverse of parsing it)."""
        return {
            "id": self.id,
            "kind": "extraction",
            "category": self.category,
            "raw": self.raw,
            "expect": self.expect(),
        }


Case = DecisionCase | ExtractionCase


@dataclass
class CaseSet:
    name: str
    sha256: str
    cases: list[Case] = field(default_factory=list)
    # Which of the file's cases these are, in words ("category paraphrase, the first 20"); empty
    # for every case. A selection's sha256 is that of its own cases as a case file, so two
    # selections of one file are two sets (their rates are not measured on the same cases).
    selection: str = ""

    def select(self, *, category: str | None = None, limit: int | None = None) -> CaseSet:
        """The cases of one category (all when None), the first `limit` of them."""
        chosen = [c for c in self.cases if category is None or c.category == category]
        if limit is not None:
            chosen = chosen[:limit]
        if len(chosen) == len(self.cases):
            return CaseSet(self.name, self.sha256, chosen, self.selection)
        words = [f"category {category}"] if category is not None else []
        words += [f"the first {limit}"] if limit is not None and len(chosen) == limit else []
        picked = CaseSet(self.name, "", chosen, ", ".join(words))
        picked.sha256 = hashlib.sha256(picked.as_jsonl().encode("utf-8")).hexdigest()
        return picked

    def as_jsonl(self) -> str:
        """The cases as a case file (one line each), as `parse` reads it back."""
        return "".join(json.dumps(c.as_json(), ensure_ascii=False) + "\n" for c in self.cases)


class _Line:
    """Validation of one line; problems collect in `errors` as "line N: ..." sentences."""

    def __init__(self, number: int, errors: list[str]):
        self.number, self.errors = number, errors

    def error(self, message: str) -> None:
        self.errors.append(f"line {self.number}: {message}")

    def keys(self, obj: dict, allowed: set[str], where: str) -> None:
        unknown = sorted(set(obj) - allowed)
        if unknown:
            names = ", ".join(repr(k) for k in unknown)
            self.error(f"unknown key{'s' if len(unknown) > 1 else ''} {names} in {where}")

    def text(self, obj: dict, key: str, where: str, *, required: bool = True) -> str | None:
        value = obj.get(key)
        if value is None and not required:
            return None
        if not isinstance(value, str) or not value.strip():
            self.error(f"{where}.{key} must be a non-empty string")
            return None
        return value

    def fact_type(self, obj: dict, where: str) -> str:
        value = obj.get("type", "fact")
        if value not in FACT_TYPES:
            self.error(f"{where}.type must be one of {', '.join(FACT_TYPES)}, got {value!r}")
            return "fact"
        return value

    def unit(self, obj: dict, key: str, where: str, *, required: bool) -> float | None:
        value = obj.get(key)
        if value is None and not required:
            return None
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        if not ok or not math.isfinite(value) or not 0 <= value <= 1:
            self.error(f"{where}.{key} must be a number from 0 to 1, got {value!r}")
            return None
        return float(value)

    def strings(self, obj: dict, key: str, where: str) -> tuple[str, ...]:
        value = obj.get(key, [])
        if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
            self.error(f"{where}.{key} must be a list of non-empty strings")
            return ()
        return tuple(value)


def _action(line: _Line, expect: dict, key: str) -> str | None:
    value = expect.get(key)
    if value is None:
        return None
    if value not in ACTIONS:
        line.error(f"expect.{key} must be one of {', '.join(ACTIONS)}, got {value!r}")
        return None
    return value


def _candidates(line: _Line, raw: object) -> tuple[CaseCandidate, ...]:
    if not isinstance(raw, list):
        line.error("candidates must be a list")
        return ()
    found, seen = [], set()
    for i, item in enumerate(raw):
        where = f"candidates[{i}]"
        if not isinstance(item, dict):
            line.error(f"{where} must be an object")
            continue
        line.keys(item, _CANDIDATE, where)
        cid, content = line.text(item, "id", where), line.text(item, "content", where)
        pinned = item.get("pinned", False)
        if not isinstance(pinned, bool):
            line.error(f"{where}.pinned must be true or false")
        score = line.unit(item, "score", where, required=False)
        if cid is not None and cid in seen:
            line.error(f"{where}.id {cid!r} is given twice")
        if cid is None or content is None:
            continue
        seen.add(cid)
        found.append(
            CaseCandidate(cid, content, line.fact_type(item, where), pinned is True, score)
        )
    return tuple(found)


def _decision(line: _Line, obj: dict, cid: str, category: str) -> DecisionCase | None:
    line.keys(obj, _DECISION, "the case")
    fact = obj.get("fact")
    if not isinstance(fact, dict):
        line.error("fact must be an object")
        fact = {}
    line.keys(fact, _FACT, "fact")
    content = line.text(fact, "content", "fact")
    fact_type = line.fact_type(fact, "fact")
    confidence = line.unit(fact, "confidence", "fact", required=True)
    candidates = _candidates(line, obj.get("candidates", []))
    expect = obj.get("expect")
    if not isinstance(expect, dict):
        line.error("expect must be an object")
        return None
    line.keys(expect, _DECISION_EXPECT, "expect")
    action, not_action = _action(line, expect, "action"), _action(line, expect, "notAction")
    # A null counts as absent: {"action": null} expected nothing, and every answer was wrong.
    if (expect.get("action") is None) == (expect.get("notAction") is None):
        line.error("expect must hold exactly one of action and notAction")
    target = line.text(expect, "target", "expect", required=False)
    ids = {c.id for c in candidates}
    if target is not None and target not in ids:
        known = ", ".join(sorted(ids)) or "none"
        line.error(f"expect.target {target!r} is not among the candidates (ids: {known})")
    if target is not None and action not in (*DESTRUCTIVE_ACTIONS, "none"):
        line.error("expect.target is only for an expected update, delete or none")
    if action in DESTRUCTIVE_ACTIONS and target is None:
        line.error(f"expect.target is required for an expected {action}")
    if action is not None and action != "add" and not candidates:
        line.error("a case with no candidates can only expect add (no model call is made)")
    if not_action == "add" and not candidates:
        # Without candidates no model is asked: the answer is always add.
        line.error("a case with no candidates cannot expect notAction add: its answer is add")
    review = expect.get("reviewNeeded")
    if review is not None and not isinstance(review, bool):
        line.error("expect.reviewNeeded must be true or false")
    if content is None or confidence is None:
        return None
    return DecisionCase(
        cid,
        category,
        content,
        fact_type,
        confidence,
        candidates,
        action,
        not_action,
        target,
        review if isinstance(review, bool) else None,
        line.number,
    )


def _extraction(line: _Line, obj: dict, cid: str, category: str) -> ExtractionCase | None:
    line.keys(obj, _EXTRACTION, "the case")
    raw = obj.get("raw")
    if not isinstance(raw, str):
        line.error("raw must be a string")
    expect = obj.get("expect")
    if not isinstance(expect, dict):
        line.error("expect must be an object")
        return None
    line.keys(expect, _EXTRACTION_EXPECT, "expect")
    facts, forbidden = (
        line.strings(expect, "facts", "expect"),
        line.strings(expect, "forbidden", "expect"),
    )
    max_facts = expect.get("maxFacts")
    if max_facts is not None and (
        not isinstance(max_facts, int) or isinstance(max_facts, bool) or max_facts < 0
    ):
        line.error(f"expect.maxFacts must be a whole number of 0 or more, got {max_facts!r}")
        max_facts = None
    if not set(expect) & _EXTRACTION_EXPECT:
        line.error("expect must hold at least one of facts, forbidden and maxFacts")
    if not isinstance(raw, str):
        return None
    return ExtractionCase(cid, category, raw, facts, forbidden, max_facts, line.number)


def _case(line: _Line, text: str) -> Case | None:
    try:
        obj = json.loads(text)
    except ValueError as exc:
        line.error(f"not valid JSON ({exc})")
        return None
    if not isinstance(obj, dict):
        line.error("a case must be a JSON object")
        return None
    cid = line.text(obj, "id", "the case")
    category = line.text(obj, "category", "the case")
    kind = obj.get("kind")
    if kind not in ("decision", "extraction"):
        line.error(f"kind must be 'decision' or 'extraction', got {kind!r}")
        return None
    build = _decision if kind == "decision" else _extraction
    case = build(line, obj, cid or "", category or "")
    return case if cid and category else None


def parse(text: str, name: str = "cases", sha256: str | None = None) -> CaseSet:
    """Every case of a JSON Lines text; CaseError names each bad line and nothing is returned.
    `sha256`: the file's digest (default: of the text as UTF-8)."""
    errors: list[str] = []
    cases: list[Case] = []
    seen: dict[str, int] = {}
    for number, raw_line in enumerate(text.splitlines(), start=1):
        stripped = raw_line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        line = _Line(number, errors)
        case = _case(line, stripped)
        if case is None:
            continue
        if case.id in seen:
            line.error(f"id {case.id!r} was already used on line {seen[case.id]}")
            continue
        seen[case.id] = number
        cases.append(case)
    if not errors and not cases:
        errors.append("no cases in the file")
    if errors:
        shown = errors[:MAX_ERRORS]
        more = len(errors) - len(shown)
        tail = f"\n... and {more} more" if more else ""
        raise CaseError(f"{name}: " + "\n".join(shown) + tail)
    return CaseSet(name, sha256 or hashlib.sha256(text.encode("utf-8")).hexdigest(), cases)


def load(path: str | Path | None = None) -> CaseSet:
    """The cases of a file, or of the shipped set when `path` is None."""
    source = resources.files("pipeline.eval").joinpath(SHIPPED) if path is None else Path(path)
    name = SHIPPED if path is None else source.name
    try:
        data = source.read_bytes()
        text = data.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise CaseError(f"{source}: cannot read the file ({exc})") from exc
    return parse(text, name, hashlib.sha256(data).hexdigest())
