"""A memory's lineage in plain words, for people new to the store: raw source -> extraction job ->
fact -> candidates -> decision -> reviewer -> applied -> what happened since.

Pure reads. `build(memory)` returns a list of `Step`s; every step has an anchor id for links and
points to the proposal, job or memory it describes. Text is plain (never HTML): templates escape
it. The number of queries is fixed, whatever the number of events or proposals: callers that
already hold the memory's proposals, source and derived memories pass them in, and the memory's
history and cold snapshots are read through `memory.history.all()` / `cold_snapshots.all()` so a
prefetch is reused.

The modules: `steps` (the records, words and links), `reads` (the queries), `sentences` (what a
job did, who decided, what became of a proposal), `history` (what happened since), and the two
stories, `derived` and `raw`.
"""

from __future__ import annotations

from dashboard.lineage import reads
from dashboard.lineage.derived import derived_story
from dashboard.lineage.raw import raw_story
from dashboard.lineage.steps import Link, Step, later_text, when_text
from memory.models import Memory

__all__ = ["Link", "Step", "build", "later_text", "when_text"]


def build(
    memory: Memory,
    *,
    proposals: list | None = None,
    source: Memory | None = None,
    derived: list[Memory] | None = None,
) -> list[Step]:
    """The memory's lineage as plain-words steps, oldest first (a fixed number of queries)."""
    history = list(memory.history.all())
    cold = list(memory.cold_snapshots.all())
    if proposals is None:
        proposals = reads.proposals_of(memory)
    if memory.is_derived:
        if source is None and memory.source_id:
            source = reads.source_of(memory)
        source_created = reads.source_created(source)
        job, calls = reads.extraction_of(reads.creator_of(memory, proposals))
        return derived_story(memory, history, cold, proposals, source, source_created, job, calls)
    if derived is None:
        derived = reads.derived_of(memory)
    jobs = reads.jobs_of(memory)
    calls = reads.calls_by_job([job.id for job in jobs])
    return raw_story(
        memory, history, cold, proposals, derived, jobs, calls, reads.triple_counts(memory)
    )
