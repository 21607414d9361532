"""A report read for people: the confusion matrix as heat-map rows (each cell's share of its row
and a shade level 0-5), the categories as bars, a failure with its case, and two runs side by
side. Pages render these; nothing here decides anything about the model."""

from __future__ import annotations

import math
from dataclasses import dataclass

from pipeline.eval.cases import CaseSet
from pipeline.eval.report import DROPPED
from pipeline.parsing import ACTIONS

LEVELS = 5
ANSWERS = (*ACTIONS, DROPPED)


def level(count: int, whole: int) -> int:
    """The shade of a cell: 0 for none, else 1..LEVELS by its share of the row."""
    return math.ceil(LEVELS * count / whole) if count and whole else 0


def heat_rows(report: dict) -> list[dict]:
    """One row per expected action: its cases and a cell per answer (count, share, level, and
    whether the answer is the expected one)."""
    rows = []
    for expected, answers in report["decision"]["confusion"].items():
        total = sum(answers.values())
        cells = [
            {
                "got": got,
                "count": answers.get(got, 0),
                "share": answers.get(got, 0) / total if total else 0.0,
                "level": level(answers.get(got, 0), total),
                "right": got == expected,
            }
            for got in ANSWERS
        ]
        rows.append({"expected": expected, "total": total, "cells": cells})
    return rows


def category_rows(report: dict) -> list[dict]:
    return [
        {"name": name, **entry, "share": entry["correct"] / entry["cases"] if entry["cases"] else 0}
        for name, entry in report["categories"].items()
    ]


def failure_of(report: dict, case_id: str) -> dict | None:
    return next((f for f in report.get("failures", []) if f["id"] == case_id), None)


def expect_rows(expect: dict) -> list[tuple[str, str]]:
    """A case's `expect` as (key, text) lines: lists joined, true/false as yes/no."""
    rows = []
    for key, value in expect.items():
        if isinstance(value, bool):
            value = "yes" if value else "no"
        elif isinstance(value, list):
            value = "; ".join(value)
        rows.append((key, str(value)))
    return rows


def case_of(case_set: CaseSet, case_id: str):
    return next((c for c in case_set.cases if c.id == case_id), None)


# --- two runs side by side ---------------------------------------------------------------------------

# (label, where in the report, True when higher is better)
HEADLINES = (
    ("Decision accuracy", ("decision", "accuracy"), True),
    ("Destructive false positives", ("decision", "destructiveFalsePositiveRate"), False),
    ("Wrong target", ("decision", "wrongTargetRate"), False),
    ("Dropped replies", ("decision", "droppedRate"), False),
    ("Review needed: precision", ("decision", "reviewNeeded", "precision"), True),
    ("Review needed: recall", ("decision", "reviewNeeded", "recall"), True),
    ("Extraction fact recall", ("extraction", "factRecall"), True),
    ("Extraction forbidden", ("extraction", "forbiddenRate"), False),
    ("Extraction over max", ("extraction", "overMaxRate"), False),
)


def shown(rate: float) -> str:
    """A rate as the page shows it (the `pct` filter's whole percents)."""
    return f"{rate * 100:.0f}"


def _value(report: dict, path: tuple[str, ...]):
    """What the report holds at `path`, None where it holds nothing."""
    value = report
    for key in path:
        value = value.get(key) if isinstance(value, dict) else None
    return value


def _at(report: dict, path: tuple[str, ...]) -> float:
    value = _value(report, path)
    return value if isinstance(value, int | float) else 0.0


def _row(label: str, a: float | None, b: float | None, higher_is_better: bool) -> dict:
    """One measure of A and B; None where a run had nothing to measure it on (no case of that
    action, category or section): no difference is claimed then."""
    if a is None or b is None:
        return {"label": label, "a": a, "b": b, "delta": None, "better": False, "worse": False}
    delta = round(b - a, 4)
    better = delta > 0 if higher_is_better else delta < 0
    # What the page shows, whole percents: where they read the same, no difference is claimed.
    moved = shown(a) != shown(b)
    return {
        "label": label,
        "a": a,
        "b": b,
        "delta": delta,
        "better": moved and better,
        "worse": moved and not better,
    }


def _f1(report: dict, action: str) -> float | None:
    """The action's F1, or None when the run had no case expecting it (its recall has nothing to
    count: an F1 of 0 then read as a model that got every one wrong)."""
    per = ((report.get("decision") or {}).get("perAction") or {}).get(action) or {}
    if not per.get("support"):
        return None
    return _at(report, ("decision", "perAction", action, "f1"))


@dataclass
class Comparison:
    headlines: list[dict]
    actions: list[dict]  # f1 per action
    categories: list[dict]
    same_set: bool
    fixed: list[str]  # case ids wrong in A, right in B (same set only)
    broken: list[str]  # right in A, wrong in B


def compare(a: dict, b: dict) -> Comparison:
    """B against A: every headline rate, each action's f1, each category's share correct, and on
    the same set (same SHA-256) the cases one got right and the other wrong."""
    headlines = [
        _row(label, _headline(a, path), _headline(b, path), up) for label, path, up in HEADLINES
    ]
    actions = [_row(action, _f1(a, action), _f1(b, action), True) for action in ACTIONS]
    names = list(dict.fromkeys([*a["categories"], *b["categories"]]))
    categories = [
        _row(name, _share(a["categories"].get(name)), _share(b["categories"].get(name)), True)
        for name in names
    ]
    same = _set_of(a) == _set_of(b)
    wrong_a = {f["id"] for f in a.get("failures", [])}
    wrong_b = {f["id"] for f in b.get("failures", [])}
    order = [f["id"] for f in a.get("failures", [])] + [f["id"] for f in b.get("failures", [])]
    fixed = [i for i in dict.fromkeys(order) if i in wrong_a - wrong_b] if same else []
    broken = [i for i in dict.fromkeys(order) if i in wrong_b - wrong_a] if same else []
    return Comparison(headlines, actions, categories, same, fixed, broken)


def _set_of(report: dict) -> tuple:
    """What a report ran on: its set's SHA-256 (a selection's own since it has one), its cases and
    which of the file's cases they were (reports written before a selection was named have none;
    their selections were told apart by nothing but the count)."""
    ran = report["set"]
    return ran["sha256"], ran["cases"], ran.get("selection", "")


def _share(entry: dict | None) -> float | None:
    """A category's share right; None when the run had no case of it (a selection of the set)."""
    return round(entry["correct"] / entry["cases"], 4) if entry and entry["cases"] else None


# A rate and the count in the report that is 0 when it had nothing to divide (reports written
# before a count was kept have none: their rate is taken as measured).
_DENOMINATORS = {
    ("decision", "reviewNeeded", "precision"): ("decision", "reviewNeeded", "flagged"),
    ("decision", "reviewNeeded", "recall"): ("decision", "reviewNeeded", "needed"),
    ("extraction", "factRecall"): ("extraction", "facts"),
}


def _headline(report: dict, path: tuple[str, ...]) -> float | None:
    """A headline rate; None when the run had nothing to measure it on: no case of its section
    (decision or extraction), for the wrong target no case expecting an update or delete, for the
    review flag no proposal flagged (precision) or none to flag (recall), for the fact recall no
    fact expected."""
    section = report.get(path[0]) or {}
    if not section.get("cases"):
        return None
    if path[-1] == "wrongTargetRate":
        per = section.get("perAction") or {}
        if not sum((per.get(a) or {}).get("support", 0) for a in ("update", "delete")):
            return None
    counted = _DENOMINATORS.get(path)
    if counted is not None and _value(report, counted) == 0:
        return None
    return _at(report, path)


# The run page's names of the rates whose report key is not their own ("precision", "recall").
_MEASURED_AS = {
    ("decision", "reviewNeeded", "precision"): "reviewPrecision",
    ("decision", "reviewNeeded", "recall"): "reviewRecall",
}


def measured(report: dict) -> dict[str, float | None]:
    """A run's headline rates by their report key (the review flag's as reviewPrecision and
    reviewRecall), None where the run had nothing to measure: the run page shows a dash there."""
    return {_MEASURED_AS.get(path, path[-1]): _headline(report, path) for _, path, _ in HEADLINES}
