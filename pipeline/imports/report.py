"""An import run's per-line report, built as its batches are recorded: the counts, the line ranges
of items imported and deduplicated (a range runs from the first to the last line of consecutive
items with that outcome), and the refusals with their line and field. No database."""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from memory.imported import DEDUPED, DONE, Outcome
from pipeline.imports.formats import Refusal
from pipeline.imports.models import REFUSALS_KEPT, ImportRun

REFUSED = "refused"
TEXT_DIFFERS, TEXT_DIFFERS_COUNT = "textDiffers", "textDiffersCount"
# Ranges kept per outcome: a file whose outcomes alternate line by line would otherwise make the
# report (rewritten with every batch) grow with the file. The counts stay exact beyond it.
RANGES_KEPT = 5000


@dataclass(frozen=True)
class Progress:
    position: int = 0  # items of the file handled
    last_line: int = 0
    counts: dict[str, int] = field(default_factory=lambda: {DONE: 0, DEDUPED: 0, REFUSED: 0})
    ranges: dict[str, list[list[int]]] = field(default_factory=lambda: {DONE: [], DEDUPED: []})
    unlisted: dict[str, int] = field(default_factory=lambda: {DONE: 0, DEDUPED: 0})
    refusals: list[dict] = field(default_factory=list)
    previous: str = ""  # the outcome of the item before: a range goes on while it is the same
    # Lines deduplicated by their id into a memory with another text (the stored one was kept),
    # the first RANGES_KEPT of them, and how many there were.
    text_differs: list[int] = field(default_factory=list)
    text_differs_count: int = 0

    @classmethod
    def of(cls, run: ImportRun) -> Progress:
        report = run.report or {}
        return cls(
            position=run.position,
            last_line=run.last_line,
            counts={DONE: run.imported, DEDUPED: run.deduped, REFUSED: run.refused},
            ranges={DONE: list(report.get(DONE, [])), DEDUPED: list(report.get(DEDUPED, []))},
            unlisted={DONE: 0, DEDUPED: 0, **report.get("unlisted", {})},
            refusals=list(report.get(REFUSED, [])),
            previous=report.get("previous", ""),
            text_differs=list(report.get(TEXT_DIFFERS, [])),
            text_differs_count=report.get(TEXT_DIFFERS_COUNT, 0),
        )

    def after(self, handled: list[Outcome | Refusal]) -> Progress:
        """A new progress with the batch's outcomes (in file order) added; this one is left as
        it was (the run's row is written from the new one only when the batch commits)."""
        counts, unlisted = dict(self.counts), dict(self.unlisted)
        ranges = {status: list(kept) for status, kept in self.ranges.items()}
        refusals, previous, last_line = list(self.refusals), self.previous, self.last_line
        differs, differs_count = list(self.text_differs), self.text_differs_count
        for outcome in handled:
            last_line = max(last_line, outcome.line)
            if isinstance(outcome, Refusal):
                counts[REFUSED] += 1
                if len(refusals) < REFUSALS_KEPT:
                    refusals.append(
                        {"line": outcome.line, "field": outcome.field, "message": outcome.message}
                    )
                previous = REFUSED
                continue
            status, kept = outcome.status, ranges[outcome.status]
            counts[status] += 1
            if outcome.text_differs:
                differs_count += 1
                if len(differs) < RANGES_KEPT:
                    differs.append(outcome.line)
            if previous == status and kept and not unlisted[status]:
                kept[-1] = [kept[-1][0], outcome.line]  # a new pair: the old one stays as it was
            elif len(kept) < RANGES_KEPT and not unlisted[status]:
                kept.append([outcome.line, outcome.line])
            else:
                unlisted[status] += 1
            previous = status
        return replace(
            self,
            position=self.position + len(handled),
            last_line=last_line,
            counts=counts,
            ranges=ranges,
            unlisted=unlisted,
            refusals=refusals,
            previous=previous,
            text_differs=differs,
            text_differs_count=differs_count,
        )

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
                "unlisted": self.unlisted,
                "previous": self.previous,
                TEXT_DIFFERS: self.text_differs,
                TEXT_DIFFERS_COUNT: self.text_differs_count,
            },
        }


def kept_stored_text(report: dict) -> str:
    """The lines whose stored memory kept its own text (see Progress.text_differs), as `lines`
    writes them ("" when there are none)."""
    listed = report.get(TEXT_DIFFERS) or []
    ranges: list[list[int]] = []
    for line in listed:  # in file order: runs of consecutive lines become ranges
        if ranges and ranges[-1][1] == line - 1:
            ranges[-1][1] = line
        else:
            ranges.append([line, line])
    return lines(ranges, max(0, report.get(TEXT_DIFFERS_COUNT, len(listed)) - len(listed)))


def spans(ranges: list[list[int]], unlisted: int = 0) -> str:
    """Line ranges as people read them: `2-40, 42, 44-90` (and how many more are not listed)."""
    text = ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in ranges)
    return f"{text} and {unlisted} more not listed" if unlisted else text


def lines(ranges: list[list[int]], unlisted: int = 0) -> str:
    """`spans` with its noun: `line 2`, `lines 2-40, 42` ("" for none)."""
    if not ranges:
        return ""
    one = len(ranges) == 1 and ranges[0][0] == ranges[0][1] and not unlisted
    return f"{'line' if one else 'lines'} {spans(ranges, unlisted)}"
