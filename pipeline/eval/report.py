"""The evaluation report: the scores of a run's outcomes (the JSON `manage.py eval` writes, whose
names are fixed) and the per-action table printed beside it."""

from __future__ import annotations

import math

from pipeline.eval.cases import DESTRUCTIVE_ACTIONS, CaseSet, DecisionCase
from pipeline.eval.outcome import Outcome
from pipeline.llm.prompts import PROMPT_VERSION
from pipeline.parsing import ACTIONS

DROPPED = "dropped"
DIGITS = 4


def rate(part: int, whole: int) -> float:
    """part / whole rounded to DIGITS places, 0.0 when there is nothing to divide by."""
    return round(part / whole, DIGITS) if whole else 0.0


def f1(precision: float, recall: float) -> float:
    total = precision + recall
    return round(2 * precision * recall / total, DIGITS) if total else 0.0


def percentile(values: list[float], p: float) -> float:
    """Nearest-rank percentile in ms (one decimal), 0.0 for no values."""
    if not values:
        return 0.0
    ordered = sorted(values)
    return round(ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)], 1)


def decision_correct(outcome: Outcome) -> bool:
    """The action matches (and, for update/delete, the target); for a rejected `notAction`, the
    model chose anything else. A dropped decision is never correct."""
    case: DecisionCase = outcome.case
    if outcome.dropped:
        return False
    if case.not_action is not None:
        return outcome.action != case.not_action
    if outcome.action != case.action:
        return False
    return case.action not in DESTRUCTIVE_ACTIONS or outcome.target == case.target


def _missing(outcome: Outcome) -> list[str]:
    texts = [f.lower() for f in outcome.facts]
    return [s for s in outcome.case.facts if not any(s.lower() in t for t in texts)]


def _forbidden_found(outcome: Outcome) -> list[str]:
    texts = [f.lower() for f in outcome.facts]
    return [s for s in outcome.case.forbidden if any(s.lower() in t for t in texts)]


def _over_max(outcome: Outcome) -> bool:
    limit = outcome.case.max_facts
    return limit is not None and len(outcome.facts) > limit


def extraction_correct(outcome: Outcome) -> bool:
    return not (_missing(outcome) or _forbidden_found(outcome) or _over_max(outcome))


def correct(outcome: Outcome) -> bool:
    if isinstance(outcome.case, DecisionCase):
        return decision_correct(outcome)
    return extraction_correct(outcome)


def harmless_cases(outcomes: list[Outcome]) -> list[Outcome]:
    """Decision cases where an update or delete is a destructive false positive: expected add or
    none, or a rejected update or delete."""
    return [
        o
        for o in outcomes
        if o.case.action in ("add", "none") or o.case.not_action in DESTRUCTIVE_ACTIONS
    ]


def _decision_scores(outcomes: list[Outcome]) -> dict:
    expected = [o for o in outcomes if o.case.action is not None]
    rejected = [o for o in outcomes if o.case.not_action is not None]
    per_action = {}
    for action in ACTIONS:
        support = sum(1 for o in expected if o.case.action == action)
        predicted = [o for o in expected if o.action == action]
        right = sum(1 for o in predicted if decision_correct(o))
        precision, recall = rate(right, len(predicted)), rate(right, support)
        per_action[action] = {
            "precision": precision,
            "recall": recall,
            "f1": f1(precision, recall),
            "support": support,
        }
    confusion = {a: {**dict.fromkeys(ACTIONS, 0), DROPPED: 0} for a in ACTIONS}
    for o in expected:
        confusion[o.case.action][DROPPED if o.dropped else o.action] += 1
    harmless = harmless_cases(outcomes)
    destructive = [o for o in expected if o.case.action in DESTRUCTIVE_ACTIONS]
    judged = [o for o in outcomes if o.case.review_needed is not None]
    flagged = [o for o in judged if o.review_needed]
    needed = [o for o in judged if o.case.review_needed]
    both = sum(1 for o in flagged if o.case.review_needed)
    return {
        "cases": len(outcomes),
        "accuracy": rate(sum(1 for o in outcomes if decision_correct(o)), len(outcomes)),
        "perAction": per_action,
        "confusion": confusion,
        "destructiveFalsePositiveRate": rate(
            sum(1 for o in harmless if o.action in DESTRUCTIVE_ACTIONS), len(harmless)
        ),
        "wrongTargetRate": rate(
            sum(1 for o in destructive if o.action == o.case.action and o.target != o.case.target),
            len(destructive),
        ),
        "droppedRate": rate(sum(1 for o in outcomes if o.dropped), len(outcomes)),
        # The counts say whether there was anything to measure (a rate of 0/0 reads 0.0).
        "reviewNeeded": {
            "precision": rate(both, len(flagged)),
            "recall": rate(both, len(needed)),
            "flagged": len(flagged),
            "needed": len(needed),
        },
        "notAction": {
            "cases": len(rejected),
            "correct": sum(1 for o in rejected if decision_correct(o)),
        },
    }


def _extraction_scores(outcomes: list[Outcome]) -> dict:
    wanted = sum(len(o.case.facts) for o in outcomes)
    found = wanted - sum(len(_missing(o)) for o in outcomes)
    return {
        "cases": len(outcomes),
        "facts": wanted,
        "factRecall": rate(found, wanted),
        "forbiddenRate": rate(sum(1 for o in outcomes if _forbidden_found(o)), len(outcomes)),
        "overMaxRate": rate(sum(1 for o in outcomes if _over_max(o)), len(outcomes)),
    }


def _got(outcome: Outcome) -> dict:
    if isinstance(outcome.case, DecisionCase):
        if outcome.dropped:
            got = {DROPPED: True, "warnings": outcome.warnings}
            if outcome.error:
                got["error"] = outcome.error
            return got
        return {
            "action": outcome.action,
            "target": outcome.target,
            "confidence": outcome.decided.confidence,
            "reason": outcome.decided.reason,
            "reviewNeeded": outcome.review_needed,
        }
    got = {
        "facts": outcome.facts,
        "missing": _missing(outcome),
        "forbiddenFound": _forbidden_found(outcome),
    }
    if outcome.error:
        got["error"] = outcome.error
    return got


def _failure(outcome: Outcome) -> dict:
    return {
        "id": outcome.case.id,
        "kind": outcome.case.kind,
        "category": outcome.case.category,
        "expected": outcome.case.expect(),
        "got": _got(outcome),
        "reply": outcome.call.raw_response if outcome.call is not None else "",
    }


def build_report(case_set: CaseSet, provider: str, model: str, outcomes: list[Outcome]) -> dict:
    decisions = [o for o in outcomes if isinstance(o.case, DecisionCase)]
    extractions = [o for o in outcomes if not isinstance(o.case, DecisionCase)]
    categories: dict[str, dict[str, int]] = {}
    for o in outcomes:
        entry = categories.setdefault(o.case.category, {"cases": 0, "correct": 0})
        entry["cases"] += 1
        entry["correct"] += int(correct(o))
    calls = [o.call for o in outcomes if o.call is not None]
    answered = [c.duration_ms for c in calls if not c.error]
    return {
        "set": {
            "name": case_set.name,
            "sha256": case_set.sha256,
            "cases": len(outcomes),
            "selection": case_set.selection,
        },
        "provider": provider,
        "model": model,
        "promptVersion": PROMPT_VERSION,
        "decision": _decision_scores(decisions),
        "extraction": _extraction_scores(extractions),
        "categories": dict(sorted(categories.items())),
        "latencyMs": {"p50": percentile(answered, 50), "p95": percentile(answered, 95)},
        "tokens": {
            "prompt": sum(c.prompt_tokens or 0 for c in calls),
            "completion": sum(c.completion_tokens or 0 for c in calls),
        },
        "failures": [_failure(o) for o in outcomes if not correct(o)],
    }


def provider_errors(outcomes: list[Outcome]) -> int:
    """Cases the model server did not answer (counted as dropped or as finding no fact)."""
    return sum(1 for o in outcomes if o.error)


def table(report: dict) -> str:
    """The per-action table and the headline rates, as the command prints them."""
    d, e = report["decision"], report["extraction"]
    lines = [
        f"{report['set']['name']} ({report['set']['cases']} cases) with {report['provider']} "
        f"{report['model']}, prompt {report['promptVersion']}",
        "",
        f"{'action':<8} {'support':>7} {'precision':>9} {'recall':>6} {'f1':>6}",
    ]
    for action, row in d["perAction"].items():
        lines.append(
            f"{action:<8} {row['support']:>7} {row['precision']:>9.3f} {row['recall']:>6.3f} "
            f"{row['f1']:>6.3f}"
        )
    lines += [
        "",
        f"decision cases {d['cases']}: accuracy {d['accuracy']:.3f}, "
        f"destructive false positives {d['destructiveFalsePositiveRate']:.3f}, "
        f"wrong target {d['wrongTargetRate']:.3f}, dropped {d['droppedRate']:.3f}",
        f"review needed: {_review_needed(d['reviewNeeded'])}; rejected actions avoided "
        f"{d['notAction']['correct']} of {d['notAction']['cases']}",
        f"extraction cases {e['cases']}: "
        + (
            f"fact recall {e['factRecall']:.3f}, "
            f"forbidden {e['forbiddenRate']:.3f}, over max {e['overMaxRate']:.3f}"
            if e["cases"]
            else "none in the set"
        ),
        f"latency p50 {report['latencyMs']['p50']} ms, p95 {report['latencyMs']['p95']} ms; "
        f"tokens {report['tokens']['prompt']} prompt, {report['tokens']['completion']} completion",
        "",
        f"{'category':<24} {'correct':>9}",
    ]
    for name, entry in report["categories"].items():
        lines.append(f"{name:<24} {entry['correct']:>4} / {entry['cases']:<4}")
    lines.append(f"\n{len(report['failures'])} failures (listed in the JSON report)")
    return "\n".join(lines)


def _review_needed(scores: dict) -> str:
    """The flag's precision and recall, or what could not be measured: a rate of 0 of 0 printed
    as 0.000 read as a model that never flagged right (a QA pass)."""
    precision = (
        f"precision {scores['precision']:.3f}"
        if scores["flagged"]
        else "precision - (none flagged)"
    )
    recall = (
        f"recall {scores['recall']:.3f}" if scores["needed"] else "recall - (no case needs review)"
    )
    return f"{precision}, {recall}"
