"""An import run's per-line report, built as its batches are recorded: the counts, the line ranges
of items imported and deduplicated (a range runs from the first to the last line of consecutive
items with that outcome), and the refusals with their line and field. No database."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field

from memory.imported import DEDUPED, DONE, Outcome
from pipeline.imports.formats import Refusal
from pipeline.imports.models import REFUSALS_KEPT, ImportRun

REFUSED = "refused"


@dataclass
class Progress:
    position: int = 0  # items of the file handled
    last_line: int = 0
    counts: dict[str, int] = field(default_factory=lambda: {DONE: 0, DEDUPED: 0, REFUSED: 0})
    ranges: dict[str, list[list[int]]] = field(default_factory=lambda: {DONE: [], DEDUPED: []})
    refusals: list[dict] = field(default_factory=list)
    _previous: str = ""  # the outcome of the item before: a range goes on while it is the same

    @classmethod
    def of(cls, run: ImportRun) -> Progress:
        report = run.report or {}
        progress = cls(
            position=run.position,
            last_line=run.last_line,
            counts={DONE: run.imported, DEDUPED: run.deduped, REFUSED: run.refused},
            ranges={DONE: report.get(DONE, []), DEDUPED: report.get(DEDUPED, [])},
            refusals=report.get(REFUSED, []),
            _previous=report.get("previous", ""),
        )
        return copy.deepcopy(progress)

    def after(self, handled: list[Outcome | Refusal]) -> Progress:
        """A copy with the batch's outcomes (in file order) added: the run's row is written
        from it only when the batch commits."""
        progress = copy.deepcopy(self)
        for outcome in handled:
            progress._add(outcome)
        return progress

    def _add(self, outcome: Outcome | Refusal) -> None:
        self.position += 1
        self.last_line = max(self.last_line, outcome.line)
        if isinstance(outcome, Refusal):
            self.counts[REFUSED] += 1
            if len(self.refusals) < REFUSALS_KEPT:
                self.refusals.append(
                    {"line": outcome.line, "field": outcome.field, "message": outcome.message}
                )
            self._previous = REFUSED
            return
        ranges = self.ranges[outcome.status]
        if self._previous == outcome.status and ranges:
            ranges[-1][1] = outcome.line
        else:
            ranges.append([outcome.line, outcome.line])
        self.counts[outcome.status] += 1
        self._previous = outcome.status

    def columns(self) -> dict:
        """The run row's columns this progress sets."""
        return {
            "position": self.position,
            "last_line": self.last_line,
            "imported": self.counts[DONE],
            "deduped": self.counts[DEDUPED],
            "refused": self.counts[REFUSED],
            "report": {
                DONE: self.ranges[DONE],
                DEDUPED: self.ranges[DEDUPED],
                REFUSED: self.refusals,
                "previous": self._previous,
            },
        }


def spans(ranges: list[list[int]]) -> str:
    """Line ranges as people read them: `2-40, 42, 44-90`."""
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in ranges)
