"""A derived memory's story: raw source -> extraction job -> fact -> candidates -> decision ->
reviewer -> applied -> what happened since."""

from __future__ import annotations

from dashboard import wording
from dashboard.lineage.history import later_steps
from dashboard.lineage.reads import creator_of
from dashboard.lineage.sentences import (
    by,
    candidates_sentence,
    decision_sentence,
    edited,
    job_sentence,
)
from dashboard.lineage.steps import (
    Step,
    audit_link,
    clip,
    job_link,
    memory_link,
    pct,
    proposal_link,
    when_text,
)
from memory.models import Job, Memory, MemoryHistory
from pipeline.config import PIPELINE_NAME as PIPELINE


def derived_story(
    memory, history, cold, proposals, source, source_created, job, calls
) -> list[Step]:
    """The derived memory's steps, oldest first; without a creating proposal, only its origin."""
    creator = creator_of(memory, proposals)
    created_event = next((h for h in history if h.event == "created"), None)
    steps = _source_steps(memory, source, source_created)
    if creator is None:
        if created_event is not None:
            steps.append(_created_step(created_event))
        return steps
    if job is not None:
        steps.append(_job_step(job, calls, creator))
    steps += [
        _fact_step(creator),
        _candidates_step(creator),
        _decision_step(creator),
        _review_step(creator),
        _applied_step(memory, creator, created_event),
    ]
    return steps + later_steps(memory, history, cold, proposals)


def _source_steps(
    memory: Memory, source: Memory | None, source_created: MemoryHistory | None
) -> list[Step]:
    """The raw source it came from (who wrote it), that it is gone, or nothing without one."""
    if source is None:
        if not memory.source_id:
            return []
        gone = (
            f"The raw memory {wording.short_id(memory.source_id)} it came from is no longer "
            f"in the store."
        )
        return [Step(anchor="lin-raw", kind="raw", label="raw source", text=gone, tone="bad")]
    writer = source_created.changed_by if source_created else (source.who or "someone")
    actor_type = source_created.actor_type if source_created else "agent"
    gone = " It has since been forgotten." if source.is_deleted else ""
    who = f" (who: {source.who})" if source.who and source.who != writer else ""
    return [
        Step(
            anchor="lin-raw",
            kind="raw",
            label="raw source",
            text=(
                f"A raw memory was written by {writer} ({actor_type}){who} on "
                f"{when_text(source.created_at)}, for agent {source.agent_id}.{gone}"
            ),
            when=source.created_at,
            actor=writer,
            quote=clip(source.content),
            quote_label="raw memory",
            links=[memory_link(source.id, f"raw memory {wording.short_id(source.id)}")],
            tone="muted" if source.is_deleted else "",
        )
    ]


def _created_step(created_event: MemoryHistory) -> Step:
    """A memory made outside the pipeline: who created it, and when."""
    return Step(
        anchor="lin-applied",
        kind="applied",
        label="created",
        text=(
            f"Created by {created_event.changed_by} ({created_event.actor_type}) on "
            f"{when_text(created_event.created_at)}."
        ),
        when=created_event.created_at,
        actor=created_event.changed_by,
        links=[audit_link(created_event)],
        tone="ok",
    )


def _job_step(job: Job, calls: dict, proposal) -> Step:
    """The extraction job that produced the creating proposal's fact."""
    text, tone = job_sentence(job, calls, "that raw memory")
    return Step(
        anchor=f"lin-job-{wording.short_id(job.id)}",
        kind="job",
        label="extraction",
        text=text,
        when=job.completed_at or job.created_at,
        actor=proposal.model,
        links=[job_link(job.id)],
        tone=tone,
    )


def _fact_step(proposal) -> Step:
    """The extracted fact: its place in the extraction, its type and the model's confidence."""
    return Step(
        anchor=f"lin-fact-{wording.short_id(proposal.id)}",
        kind="fact",
        label="fact",
        text=(
            f"Fact #{proposal.position + 1} of that extraction: a {proposal.fact_type} with "
            f"{pct(proposal.fact_confidence)} confidence."
        ),
        when=proposal.created_at,
        actor=proposal.model,
        quote=clip(proposal.fact_content),
        quote_label="extracted fact",
        links=[proposal_link(proposal)],
    )


def _candidates_step(proposal) -> Step:
    """The memories hybrid search found to compare the fact with, quoting the closest."""
    candidates = proposal.candidates or []
    top = max(candidates, key=lambda c: c.get("score") or 0) if candidates else None
    return Step(
        anchor=f"lin-cand-{wording.short_id(proposal.id)}",
        kind="candidates",
        label="candidates",
        text=candidates_sentence(proposal),
        when=proposal.created_at,
        quote=clip(top.get("content"), 200) if top else None,
        quote_label="closest candidate" if top else "",
        links=[memory_link(top["memoryId"], "closest candidate")]
        if top and top.get("memoryId")
        else [],
        tone="muted",
    )


def _decision_step(proposal) -> Step:
    """The model's decision about the fact, quoting its reason."""
    return Step(
        anchor=f"lin-decision-{wording.short_id(proposal.id)}",
        kind="decision",
        label="decision",
        text=decision_sentence(proposal),
        when=proposal.created_at,
        actor=proposal.model,
        quote=clip(proposal.reason, 300),
        quote_label="reason",
        links=[proposal_link(proposal)],
    )


def _review_step(proposal) -> Step:
    """Who let the proposal through (a reviewer, or the pipeline on its own) and any text edit."""
    if proposal.decided_by == PIPELINE:
        review_text = (
            f"Applied automatically by {PIPELINE} in {proposal.mode} mode: no human reviewed it."
        )
        actor = PIPELINE
    else:
        review_text = by(
            "Approved",
            proposal.decided_by,
            proposal.created_at,
            proposal.decided_at,
            proposal.review_note,
        )
        review_text += "" if proposal.review_note else "."
        actor = proposal.decided_by or ""
    was_edited = edited(proposal)
    return Step(
        anchor=f"lin-review-{wording.short_id(proposal.id)}",
        kind="review",
        label="approved" if proposal.decided_by != PIPELINE else "automatic",
        text=review_text
        + (" The reviewer edited the text before approving." if was_edited else ""),
        when=proposal.decided_at,
        actor=actor,
        quote=clip(proposal.fact_content) if was_edited else None,
        quote_label="the model's text" if was_edited else "",
        links=[proposal_link(proposal)],
        tone="ok",
    )


def _applied_step(memory: Memory, proposal, created_event: MemoryHistory | None) -> Step:
    """The write of version 1, quoting the original text when it has changed since."""
    created_at = created_event.created_at if created_event else memory.created_at
    return Step(
        anchor="lin-applied",
        kind="applied",
        label="applied",
        text=(
            f"Written to the store as this memory (version 1) on {when_text(created_at)}. "
            f"{wording.asserted_by(memory)}"
        ),
        when=created_at,
        actor=created_event.changed_by if created_event else (proposal.decided_by or ""),
        quote=clip(created_event.new_content)
        if created_event and created_event.new_content != memory.content
        else None,
        quote_label="original text",
        links=[audit_link(created_event)] if created_event else [],
        tone="ok",
    )
