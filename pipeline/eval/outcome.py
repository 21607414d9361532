"""What the job's code made of one evaluation case: the model call, the decision or the facts;
and its JSON, as a queued run records it between attempts (pipeline.eval.runs)."""

from __future__ import annotations

from dataclasses import dataclass, field

from pipeline import decision
from pipeline.contradiction import Contradiction
from pipeline.eval.cases import Case, DecisionCase
from pipeline.llm import CallRecord
from pipeline.parsing import Candidate, Fact

# What a recorded call keeps: the report reads the reply, its time, tokens and error.
_CALL_KEYS = ("kind", "provider", "model", "raw_response", "duration_ms", "prompt_tokens")
_CALL_KEYS += ("completion_tokens", "error")


@dataclass
class Outcome:
    """What the job's code made of one case."""

    case: Case
    call: CallRecord | None = None  # None: no model call was made (or it failed before a reply)
    error: str | None = None  # the provider failed: no reply to judge
    warnings: list[str] = field(default_factory=list)
    # decision cases
    decided: decision.Decided | None = None
    # extraction cases
    facts: list[str] = field(default_factory=list)

    @property
    def dropped(self) -> bool:
        """A decision the job would have dropped (or never got): no proposal."""
        return self.decided is None

    @property
    def action(self) -> str | None:
        return None if self.decided is None else str(self.decided.action)

    @property
    def target(self) -> str | None:
        target = None if self.decided is None else self.decided.target
        return None if target is None else target.candidate.memory_id

    @property
    def review_needed(self) -> bool:
        flagged = None if self.decided is None else self.decided.contradiction
        return bool(flagged and flagged.flagged)

    def as_json(self) -> dict:
        """What the report needs of this outcome (the prompt is left out: the case rebuilds it)."""
        data: dict = {"error": self.error, "warnings": self.warnings, "facts": self.facts}
        if self.call is not None:
            data["call"] = {key: getattr(self.call, key) for key in _CALL_KEYS}
        if self.decided is not None:
            data["decided"] = {
                "action": self.action,
                "target": self.target,
                "confidence": self.decided.confidence,
                "reason": self.decided.reason,
                "reviewNeeded": self.review_needed,
            }
        return data

    @classmethod
    def from_json(cls, case: Case, data: dict) -> Outcome:
        call = data.get("call")
        return cls(
            case,
            CallRecord(prompt="", **call) if call else None,
            data.get("error"),
            list(data.get("warnings") or []),
            _decided(case, data.get("decided")),
            list(data.get("facts") or []),
        )


def _decided(case: Case, saved: dict | None) -> decision.Decided | None:
    """A recorded decision rebuilt as far as the report reads it."""
    if saved is None or not isinstance(case, DecisionCase):
        return None
    target = None
    if saved["target"] is not None:
        target = decision.ScoredCandidate(
            Candidate(0, saved["target"], ""), 1, 0.0, None, None, False
        )
    flagged = None
    if saved["reviewNeeded"]:
        flagged = Contradiction(True, None, [], None, None, "")
    fact = Fact(case.fact_content, case.fact_type, case.fact_confidence)
    return decision.Decided(
        0, fact, saved["action"], target, saved["confidence"], saved["reason"], [], flagged
    )
