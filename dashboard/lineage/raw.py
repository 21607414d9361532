"""A raw memory's story: who wrote it, its extraction jobs, every fact each job found and what
became of it, the entity triples, then what happened since."""

from __future__ import annotations

from collections import defaultdict

from dashboard import wording
from dashboard.lineage.history import later_steps
from dashboard.lineage.sentences import (
    candidates_sentence,
    decision_sentence,
    fate,
    job_sentence,
)
from dashboard.lineage.steps import (
    Link,
    Step,
    audit_link,
    clip,
    job_link,
    memory_link,
    pct,
    plural,
    proposal_link,
    when_text,
)
from memory.models import Job, Memory


def raw_story(memory, history, cold, proposals, derived, jobs, calls, triples) -> list[Step]:
    """The raw memory's steps: its writing, per job the job, its facts and triples, then later."""
    steps = [_written_step(memory, history)]
    derived_by_id = {m.id: m for m in derived}
    by_job: dict[str, list] = defaultdict(list)
    for proposal in proposals:
        if proposal.source_memory_id == memory.id:
            by_job[proposal.job_id].append(proposal)
    if not jobs and memory.extraction_status == "none":
        steps.append(_no_job_step())
    for job in jobs:
        steps.append(_job_step(job, calls))
        for proposal in sorted(by_job.get(job.id, []), key=lambda p: p.position):
            steps.append(_fact_step(proposal, derived_by_id))
        counts = triples.get(job.id)
        if counts:
            steps.append(_triples_step(job, counts))
    return steps + later_steps(memory, history, cold, proposals)


def _written_step(memory: Memory, history: list) -> Step:
    """Who wrote the raw memory, when, for which agent and why."""
    created_event = next((h for h in history if h.event == "created"), None)
    writer = created_event.changed_by if created_event else (memory.who or "someone")
    actor_type = created_event.actor_type if created_event else "agent"
    who = f" (who: {memory.who})" if memory.who and memory.who != writer else ""
    why = f" Why: “{memory.why}”." if memory.why else ""
    return Step(
        anchor="lin-raw",
        kind="raw",
        label="raw memory",
        text=(
            f"Written by {writer} ({actor_type}){who} on {when_text(memory.created_at)}, "
            f"for agent {memory.agent_id}.{why} {wording.asserted_by(memory, history)}"
        ),
        when=memory.created_at,
        actor=writer,
        links=[audit_link(created_event)] if created_event else [],
    )


def _no_job_step() -> Step:
    """A raw memory stored without going through the pipeline."""
    return Step(
        anchor="lin-nojob",
        kind="job",
        label="no extraction",
        text="No extraction job: it was stored without going through the pipeline.",
        tone="muted",
    )


def _job_step(job: Job, calls: dict) -> Step:
    """One extraction job of the raw memory and how it went."""
    text, tone = job_sentence(job, calls, "this raw memory")
    return Step(
        anchor=f"lin-job-{wording.short_id(job.id)}",
        kind="job",
        label="extraction",
        text=f"{text[0].upper()}{text[1:]}",
        when=job.completed_at or job.failed_at or job.created_at,
        actor=((job.result or {}).get("model") or ""),
        links=[job_link(job.id)],
        tone=tone,
    )


def _fact_links(proposal) -> list[Link]:
    """The proposal, the memory it made or changed, and the existing memory or target it named."""
    links = [proposal_link(proposal)]
    made = proposal.created_memory_id or proposal.updated_memory_id or proposal.deleted_memory_id
    if made:
        links.append(memory_link(made))
    if proposal.deduped_existing_id:
        links.append(memory_link(proposal.deduped_existing_id, "existing memory"))
    elif proposal.target_memory_id and proposal.target_memory_id != made:
        links.append(memory_link(proposal.target_memory_id, "target"))
    return links


def _fact_step(proposal, derived_by_id: dict[str, Memory]) -> Step:
    """One fact the job found: the search, the decision, and what became of it."""
    told, outcome, tone = fate(proposal, derived_by_id)
    return Step(
        anchor=f"lin-fact-{wording.short_id(proposal.id)}",
        kind="fact",
        label=f"fact → {proposal.action.upper()}"
        + (f", applied as {proposal.applied_as.upper()}" if proposal.applied_as else ""),
        text=(
            f"Fact #{proposal.position + 1} ({proposal.fact_type}, "
            f"{pct(proposal.fact_confidence)} confidence). {candidates_sentence(proposal)} "
            f"{decision_sentence(proposal)}"
        ),
        when=proposal.created_at,
        actor=proposal.model,
        quote=clip(proposal.fact_content),
        quote_label="fact",
        outcome=outcome,
        fate=told,
        links=_fact_links(proposal),
        tone=tone,
    )


def _triples_step(job: Job, counts: dict[str, int]) -> Step:
    """The entity triples the job found for the graph, counted by review status."""
    total = sum(counts.values())
    parts = ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
    return Step(
        anchor=f"lin-triples-{wording.short_id(job.id)}",
        kind="triples",
        label="entity triples",
        text=(
            f"The extraction also found {plural(total, 'entity triple')} for the graph: "
            f"{parts}. Only approved triples create entities and mentions."
        ),
        when=job.completed_at or job.created_at,
        links=[job_link(job.id, "#triples")],
        tone="warn" if counts.get("pending") else "muted",
    )
