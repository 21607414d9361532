"""What the job's code made of one evaluation case: the model call, the decision or the facts."""

from __future__ import annotations

from dataclasses import dataclass, field

from pipeline import decision
from pipeline.eval.cases import Case
from pipeline.llm import CallRecord


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
