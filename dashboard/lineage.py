"""A memory's lineage in plain words, for people new to the store: raw source -> extraction job ->
fact -> candidates -> decision -> reviewer -> applied -> what happened since.

Pure reads. `build(memory)` returns a list of `Step`s; every step has an anchor id for links and
points to the proposal, job or memory it describes. Text is plain (never HTML): templates escape
it. The number of queries is fixed, whatever the number of events or proposals: callers that
already hold the memory's proposals, source and derived memories pass them in, and the memory's
history and cold snapshots are read through `memory.history.all()` / `cold_snapshots.all()` so a
prefetch is reused.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime

from django.db.models import Count, Q
from django.urls import reverse
from django.utils import timezone

from dashboard import wording
from memory.models import DERIVED_SOURCE_TYPE as DERIVED
from memory.models import Job, JobStatus, Memory, MemoryCold, MemoryHistory
from pipeline.config import PIPELINE_NAME as PIPELINE
from pipeline.models import LlmCall, Proposal, TripleReview

QUOTE_CHARS = 400
# Audit rows already told through the proposals they belong to, or noise in a story.
TOLD_ELSEWHERE = {"created", "none", "reviewed"}


@dataclass
class Link:
    label: str
    href: str


@dataclass
class Step:
    """One sentence of the story, with where it happened and who did it."""

    anchor: str
    kind: str  # raw, job, fact, candidates, decision, review, applied, updated, superseded, ...
    label: str  # the badge: a word or two
    text: str
    when: datetime | None = None
    actor: str = ""
    quote: str | None = None
    quote_label: str = ""
    outcome: str = ""  # raw memories: what became of a fact, in words
    fate: str = ""  # raw memories: applied / pending / rejected / suppressed / ...
    links: list[Link] = field(default_factory=list)
    tone: str = ""  # ok / warn / bad / muted: the dot's colour

    def __post_init__(self) -> None:
        self.label = self.label[:1].upper() + self.label[1:]  # badges read as words: "Updated"


# --- words --------------------------------------------------------------------------------------------


def when_text(value: datetime | None) -> str:
    """'29 Nov 2026 at 14:03 UTC'."""
    if value is None:
        return "an unknown time"
    local = timezone.localtime(value)
    return f"{local.day} {local:%b %Y} at {local:%H:%M} {local.tzname() or ''}".strip()


def _plural(n: int, word: str) -> str:
    if n == 0:
        return f"no {word}s"
    return f"{n} {word}" if n == 1 else f"{n} {word}s"


def later_text(start: datetime | None, end: datetime | None) -> str:
    """'3 minutes later' (or 'at once' when it happened in the same second)."""
    if start is None or end is None:
        return ""
    seconds = (end - start).total_seconds()
    if seconds < 1:
        return "within a second"
    if seconds < 60:
        return _plural(int(seconds), "second") + " later"
    if seconds < 3600:
        return _plural(int(seconds // 60), "minute") + " later"
    if seconds < 2 * 86400:
        return _plural(int(seconds // 3600), "hour") + " later"
    return _plural(int(seconds // 86400), "day") + " later"


def _pct(value) -> str:
    try:
        return f"{float(value) * 100:.0f}%"
    except (TypeError, ValueError):
        return "?"


def _clip(text: str | None, limit: int = QUOTE_CHARS) -> str | None:
    if text is None:
        return None
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _prompt_version(proposal) -> str:
    """The version stored with the proposal; proposals made before it was stored show "v1"."""
    return proposal.prompt_version or "v1"


# --- links ----------------------------------------------------------------------------------------------


def _memory_link(memory_id: str, label: str | None = None) -> Link:
    return Link(
        label or f"memory {wording.short_id(memory_id)}",
        reverse("dashboard:memory", args=[memory_id]),
    )


def _proposal_link(proposal) -> Link:
    return Link(
        f"proposal {wording.short_id(proposal.id)}",
        reverse("dashboard:proposal", args=[proposal.id]),
    )


def _job_link(job_id: str, suffix: str = "") -> Link:
    return Link(f"job {wording.short_id(job_id)}", reverse("dashboard:job", args=[job_id]) + suffix)


# --- reads (a fixed number of queries) ------------------------------------------------------------------


def _proposals_of(memory: Memory) -> list:
    return list(
        Proposal.objects.filter(
            Q(source_memory=memory)
            | Q(target_memory=memory)
            | Q(created_memory=memory)
            | Q(updated_memory=memory)
            | Q(deleted_memory=memory)
            | Q(deduped_existing=memory)
        ).order_by("created_at", "position")
    )


def _calls_by_job(job_ids: list[str]) -> dict[str, dict]:
    """Per job: model calls by kind and the extraction model (one GROUP BY query)."""
    calls: dict[str, dict] = defaultdict(lambda: {"kinds": defaultdict(int), "models": set()})
    if not job_ids:
        return calls
    rows = (
        LlmCall.objects.filter(job_id__in=job_ids)
        .order_by()
        .values("job_id", "kind", "model", "provider")
        .annotate(n=Count("id"))
    )
    for row in rows:
        entry = calls[row["job_id"]]
        entry["kinds"][row["kind"]] += row["n"]
        if row["kind"] == "extract":
            entry["models"].add((row["model"], row["provider"]))
    return calls


def _triple_counts(memory: Memory) -> dict[str, dict[str, int]]:
    counts: dict[str, dict[str, int]] = defaultdict(dict)
    rows = (
        TripleReview.objects.filter(source_memory_id=memory.id)
        .order_by()
        .values("job_id", "status")
        .annotate(n=Count("id"))
    )
    for row in rows:
        counts[row["job_id"]][row["status"]] = row["n"]
    return counts


# --- shared pieces ----------------------------------------------------------------------------------------


def _job_sentence(job: Job, calls: dict, source_label: str) -> tuple[str, str]:
    """(sentence, tone) describing an extraction job in plain words."""
    result = job.result or {}
    entry = calls.get(job.id) or {"kinds": {}, "models": set()}
    model = result.get("model") or next(iter(sorted(entry["models"])), ("", ""))[0]
    provider = result.get("provider") or next(iter(sorted(entry["models"])), ("", ""))[1]
    kinds = entry["kinds"]
    n_calls = sum(kinds.values())
    order = {"extract": 0, "decide": 1, "embed": 2}
    call_words = ", ".join(
        f"{n} {kind}" for kind, n in sorted(kinds.items(), key=lambda i: (order.get(i[0], 9), i[0]))
    )
    calls_text = f"{_plural(n_calls, 'model call')} ({call_words})" if n_calls else "no model call"
    by = f"{model} (via {provider})" if model and provider else (model or "the model")
    if job.status == JobStatus.COMPLETED:
        if result.get("cancelled"):
            return (
                f"Extraction job {wording.short_id(job.id)} was cancelled: {result['cancelled']}.",
                "muted",
            )
        facts = len(result.get("facts") or [])
        triples = len(result.get("entities") or [])
        mode = result.get("writeMode")
        mode_text = f", {mode} mode" if mode else ""
        finished = job.completed_at or job.updated_at
        return (
            f"Extracted by {by} from {source_label} on {when_text(finished)} "
            f"(job {wording.short_id(job.id)}{mode_text}): {_plural(facts, 'fact')}, "
            f"{_plural(triples, 'entity triple')}, {calls_text}.",
            "ok",
        )
    if job.status == JobStatus.DEAD:
        return (
            f"Extraction job {wording.short_id(job.id)} failed after {_plural(job.attempts, 'attempt')}: "
            f"{job.error or 'no error recorded'}.",
            "bad",
        )
    if job.status == JobStatus.CANCELLED:
        return (
            f"Extraction job {wording.short_id(job.id)} was cancelled: {job.error or 'no reason recorded'}.",
            "muted",
        )
    if job.status == JobStatus.LEASED:
        return (
            f"Extraction job {wording.short_id(job.id)} is running (attempt {job.attempts} of "
            f"{job.max_attempts}).",
            "warn",
        )
    return f"Extraction job {wording.short_id(job.id)} is waiting for a worker.", "warn"


def _by(verb: str, who: str | None, start, end, note: str | None) -> str:
    """'approved by rita 3 minutes later: “matches the wiki”'."""
    words = [verb, "by", who or "a reviewer", later_text(start, end)]
    text = " ".join(word for word in words if word)
    return text + (f": “{note}”" if note else "")


def _decider(proposal) -> str:
    if proposal.decided_by == PIPELINE:
        return f"applied automatically by {PIPELINE} in {proposal.mode} mode, with no human review"
    return _by(
        "approved",
        proposal.decided_by,
        proposal.created_at,
        proposal.decided_at,
        proposal.review_note,
    )


def _edited(proposal) -> bool:
    return bool(proposal.applied_content) and proposal.applied_content != proposal.fact_content


def _fate(proposal, derived: dict[str, Memory]) -> tuple[str, str, str]:
    """(fate, sentence, tone) of a proposal from a raw memory."""
    status = proposal.status
    if status == "applied":
        decider = _decider(proposal)
        edited = " (text edited by the reviewer)" if _edited(proposal) else ""
        reverted = (
            f" Later {_by('reverted', proposal.reverted_by, proposal.decided_at, proposal.reverted_at, None)}."
            if proposal.reverted_at
            else ""
        )
        if proposal.created_memory_id:
            made = derived.get(proposal.created_memory_id)
            gone = " It has since been forgotten." if made and made.is_deleted else ""
            return (
                "reverted" if proposal.reverted_at else "applied",
                f"Became memory {wording.short_id(proposal.created_memory_id)}, {decider}{edited}.{reverted}{gone}",
                "warn" if proposal.reverted_at else "ok",
            )
        verb = "updated" if proposal.action == "update" else "forgot"
        target = (
            proposal.updated_memory_id or proposal.deleted_memory_id or proposal.target_memory_id
        )
        return (
            "reverted" if proposal.reverted_at else "applied",
            f"{verb.capitalize()} memory {wording.short_id(target)}, {decider}{edited}.{reverted}",
            "warn" if proposal.reverted_at else "ok",
        )
    if status == "pending":
        why = f" ({proposal.blocked_reason.replace('_', ' ')})" if proposal.blocked_reason else ""
        flag = " The contradiction detector flagged it." if proposal.review_needed else ""
        return "pending", f"Waiting for a reviewer{why}.{flag}", "warn"
    if status == "rejected":
        rejected = _by(
            "Rejected",
            proposal.decided_by,
            proposal.created_at,
            proposal.decided_at,
            proposal.review_note,
        )
        return "rejected", f"{rejected}.", "bad"
    if status == "suppressed":
        return (
            "suppressed",
            "Suppressed: a reviewer had rejected the same proposal before, so it was not queued again.",
            "muted",
        )
    if status == "deduped":
        existing = proposal.deduped_existing_id
        who = (
            f", {_decider(proposal)}"
            if proposal.decided_by and proposal.decided_by != PIPELINE
            else ""
        )
        return (
            "deduped",
            f"Already in the store as memory {wording.short_id(existing)}: deduplicated, nothing new written{who}.",
            "muted",
        )
    if status == "skipped":
        why = (proposal.skipped_reason or "no reason").replace("_", " ")
        return "skipped", f"Skipped ({why}); a reviewer can still approve it.", "muted"
    if status == "recorded":
        return (
            "recorded",
            "Nothing to change: the model decided NONE, and that was recorded.",
            "muted",
        )
    if status == "stale":
        return (
            "stale",
            "Stale: its target changed before anyone applied it; waiting for a reviewer to re-decide.",
            "warn",
        )
    return status, f"{status.capitalize()}.", "muted"


def _candidates_sentence(proposal) -> str:
    candidates = proposal.candidates or []
    if not candidates:
        return "Hybrid search found no similar memory, so no decision call was needed."
    scores = [c.get("score") for c in candidates if isinstance(c.get("score"), int | float)]
    top = max(scores) if scores else None
    closest = f"; the closest scored {top:.2f}" if top is not None else ""
    found = (
        "1 candidate memory" if len(candidates) == 1 else f"{len(candidates)} candidate memories"
    )
    return f"Hybrid search found {found}{closest}."


def _decision_sentence(proposal) -> str:
    target = (
        f" memory {wording.short_id(proposal.target_memory_id)}"
        if proposal.target_memory_id
        else ""
    )
    if not proposal.candidates and proposal.action == "add":
        return (
            f"With nothing to compare it with, the pipeline proposed ADD without a decision call, "
            f"at the fact's own {_pct(proposal.confidence)} confidence, in {proposal.mode} mode."
        )
    return (
        f"{proposal.model} (prompt {_prompt_version(proposal)}) decided {proposal.action.upper()}{target} "
        f"with {_pct(proposal.confidence)} confidence, in {proposal.mode} mode."
    )


# --- history events ---------------------------------------------------------------------------------------


def _history_steps(
    memory: Memory, history: list[MemoryHistory], cold: list[MemoryCold], by_id: dict
) -> list[Step]:
    """Later events of the memory's own audit trail (not its creation, not pipeline audits)."""
    snapshots = {(snap.version, snap.archived_at): snap for snap in cold}
    steps: list[Step] = []
    for event in history:
        if event.event in TOLD_ELSEWHERE:
            continue
        meta = event.metadata if isinstance(event.metadata, dict) else {}
        proposal = by_id.get(meta.get("proposalId"))
        version = meta.get("version")
        links = [_proposal_link(proposal)] if proposal else []
        anchor = f"lin-h-{wording.short_id(event.id)}"
        reason = f": “{event.reason}”" if event.reason else ""
        quote, quote_label = None, ""
        revert, undo = meta.get("revert"), meta.get("undoRevert")
        if revert or undo:
            what = proposal.action.upper() if proposal else "change"
            done = {
                "updated": "the previous text is back",
                "deleted": "this memory was forgotten (soft delete)",
                "recovered": "this memory is back",
            }.get(event.event, event.event)
            if undo:
                text = f"{event.changed_by} undid the revert of the {what}: {done}{reason}."
            else:
                text = f"Reverted by {event.changed_by}: the {what} was undone and {done}{reason}."
            kind, label, tone = "reverted", "reverted", "warn"
        elif event.event == "updated":
            if proposal is not None:
                source = proposal.source_memory_id
                decider = _decider(proposal)
                text = (
                    f"Updated to version {version} by {_proposal_link(proposal).label} "
                    f"(UPDATE from raw memory {wording.short_id(source)}), {decider}."
                )
                links.append(_memory_link(source, f"raw memory {wording.short_id(source)}"))
            else:
                fields = ", ".join(meta.get("changedFields") or []) or "fields"
                text = f"Edited by {event.changed_by} ({event.actor_type}): {fields} changed, now version {version}{reason}."
            kind, label, tone = "updated", "updated", "ok"
            if event.new_content is not None:
                quote, quote_label = _clip(event.new_content), "new text"
        elif event.event == "deleted":
            if proposal is not None:
                text = (
                    f"Forgotten by {_proposal_link(proposal).label} (DELETE from raw memory "
                    f"{wording.short_id(proposal.source_memory_id)}), {_decider(proposal)}."
                )
                links.append(_memory_link(proposal.source_memory_id, "raw memory"))
            else:
                text = f"Forgotten (soft delete) by {event.changed_by}{reason}."
            kind, label, tone = "deleted", "deleted", "bad"
        elif event.event == "recovered":
            text = f"Recovered by {event.changed_by}{reason}."
            kind, label, tone = "recovered", "recovered", "ok"
        else:
            text = f"{event.event.replace('_', ' ').capitalize()} by {event.changed_by}{reason}."
            kind, label, tone = event.event, event.event.replace("_", " "), "muted"
            if meta.get("jobId"):
                links.append(_job_link(meta["jobId"]))
        links.append(Link("audit row", f"#h-{event.id}"))
        steps.append(
            Step(
                anchor=anchor,
                kind=kind,
                label=label,
                text=text,
                when=event.created_at,
                actor=event.changed_by,
                quote=quote,
                quote_label=quote_label,
                links=links,
                tone=tone,
            )
        )
        snap = snapshots.get(((version or 0) - 1, event.created_at))
        if event.event == "updated" and snap is not None:
            steps.append(
                Step(
                    anchor=f"lin-cold-{wording.short_id(snap.archive_id)}",
                    kind="superseded",
                    label="superseded",
                    text=(
                        f"Version {snap.version} was superseded; its full row is kept in the cold "
                        f"tier (archived as “{snap.archived_reason}”)."
                    ),
                    when=snap.archived_at,
                    quote=_clip(snap.content),
                    quote_label=f"version {snap.version}",
                    links=[Link("cold tier", "#cold")],
                    tone="muted",
                )
            )
    return steps


def _targeting_steps(memory: Memory, proposals: list) -> list[Step]:
    """Proposals from other raw memories about this one that did not change it (yet)."""
    steps = []
    for proposal in proposals:
        if proposal.source_memory_id == memory.id or proposal.created_memory_id == memory.id:
            continue
        if proposal.status == "applied" and memory.id in (
            proposal.updated_memory_id,
            proposal.deleted_memory_id,
        ):
            continue  # told by the memory's own updated/deleted event
        links = [
            _proposal_link(proposal),
            _memory_link(
                proposal.source_memory_id,
                f"raw memory {wording.short_id(proposal.source_memory_id)}",
            ),
        ]
        if proposal.deduped_existing_id == memory.id and proposal.target_memory_id != memory.id:
            text = (
                f"Raw memory {wording.short_id(proposal.source_memory_id)} produced the same fact again; "
                f"it was deduplicated into this memory."
            )
            steps.append(
                Step(f"lin-target-{wording.short_id(proposal.id)}", "deduped", "same fact again", text,
                     proposal.created_at, proposal.model, links=links, tone="muted")
            )  # fmt: skip
            continue
        fate, outcome, tone = _fate(proposal, {})
        if proposal.action == "none":
            text = (
                f"Raw memory {wording.short_id(proposal.source_memory_id)} said this again; "
                f"{proposal.model} decided NONE: nothing to change."
            )
            outcome, tone = "", "muted"
        else:
            text = (
                f"{proposal.model} proposed to {proposal.action.upper()} this memory, from raw "
                f"memory {wording.short_id(proposal.source_memory_id)}."
            )
        steps.append(
            Step(
                anchor=f"lin-target-{wording.short_id(proposal.id)}",
                kind="targeted",
                label=f"{proposal.action.upper()} proposed",
                text=text,
                when=proposal.created_at,
                actor=proposal.model,
                quote=_clip(proposal.fact_content) if proposal.action != "none" else None,
                quote_label="proposed text" if proposal.action == "update" else "",
                outcome=outcome,
                fate=fate,
                links=links,
                tone=tone,
            )
        )
    return steps


# --- the two stories --------------------------------------------------------------------------------------


def _derived_story(
    memory, history, cold, proposals, source, source_created, job, calls
) -> list[Step]:
    by_id = {p.id: p for p in proposals}
    creator = next((p for p in proposals if p.created_memory_id == memory.id), None)
    created_event = next((h for h in history if h.event == "created"), None)
    steps: list[Step] = []
    if source is not None:
        writer = source_created.changed_by if source_created else (source.who or "someone")
        actor_type = source_created.actor_type if source_created else "agent"
        gone = " It has since been forgotten." if source.is_deleted else ""
        who = f" (who: {source.who})" if source.who and source.who != writer else ""
        steps.append(
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
                quote=_clip(source.content),
                quote_label="raw memory",
                links=[_memory_link(source.id, f"raw memory {wording.short_id(source.id)}")],
                tone="muted" if source.is_deleted else "",
            )
        )
    elif memory.source_id:
        steps.append(
            Step("lin-raw", "raw", "raw source",
                 f"The raw memory {wording.short_id(memory.source_id)} it came from is no longer in the store.",
                 tone="bad")
        )  # fmt: skip
    if creator is None:
        if created_event is not None:
            steps.append(
                Step(
                    anchor="lin-applied",
                    kind="applied",
                    label="created",
                    text=f"Created by {created_event.changed_by} ({created_event.actor_type}) on {when_text(created_event.created_at)}.",
                    when=created_event.created_at,
                    actor=created_event.changed_by,
                    links=[Link("audit row", f"#h-{created_event.id}")],
                    tone="ok",
                )
            )
        return steps
    proposal = creator
    if job is not None:
        text, tone = _job_sentence(job, calls, "that raw memory")
        steps.append(
            Step(f"lin-job-{wording.short_id(job.id)}", "job", "extraction", text, job.completed_at or job.created_at,
                 proposal.model, links=[_job_link(job.id)], tone=tone)
        )  # fmt: skip
    steps.append(
        Step(
            anchor=f"lin-fact-{wording.short_id(proposal.id)}",
            kind="fact",
            label="fact",
            text=(
                f"Fact #{proposal.position + 1} of that extraction: a {proposal.fact_type} with "
                f"{_pct(proposal.fact_confidence)} confidence."
            ),
            when=proposal.created_at,
            actor=proposal.model,
            quote=_clip(proposal.fact_content),
            quote_label="extracted fact",
            links=[_proposal_link(proposal)],
        )
    )
    candidates = proposal.candidates or []
    top = max(candidates, key=lambda c: c.get("score") or 0) if candidates else None
    steps.append(
        Step(
            anchor=f"lin-cand-{wording.short_id(proposal.id)}",
            kind="candidates",
            label="candidates",
            text=_candidates_sentence(proposal),
            when=proposal.created_at,
            quote=_clip(top.get("content"), 200) if top else None,
            quote_label="closest candidate" if top else "",
            links=[_memory_link(top["memoryId"], "closest candidate")]
            if top and top.get("memoryId")
            else [],
            tone="muted",
        )
    )
    steps.append(
        Step(
            anchor=f"lin-decision-{wording.short_id(proposal.id)}",
            kind="decision",
            label="decision",
            text=_decision_sentence(proposal),
            when=proposal.created_at,
            actor=proposal.model,
            quote=_clip(proposal.reason, 300),
            quote_label="reason",
            links=[_proposal_link(proposal)],
        )
    )
    if proposal.decided_by == PIPELINE:
        review_text = (
            f"Applied automatically by {PIPELINE} in {proposal.mode} mode: no human reviewed it."
        )
        actor = PIPELINE
    else:
        review_text = _by(
            "Approved",
            proposal.decided_by,
            proposal.created_at,
            proposal.decided_at,
            proposal.review_note,
        )
        review_text += "" if proposal.review_note else "."
        actor = proposal.decided_by or ""
    edited = _edited(proposal)
    steps.append(
        Step(
            anchor=f"lin-review-{wording.short_id(proposal.id)}",
            kind="review",
            label="approved" if proposal.decided_by != PIPELINE else "automatic",
            text=review_text
            + (" The reviewer edited the text before approving." if edited else ""),
            when=proposal.decided_at,
            actor=actor,
            quote=_clip(proposal.fact_content) if edited else None,
            quote_label="the model's text" if edited else "",
            links=[_proposal_link(proposal)],
            tone="ok",
        )
    )
    created_at = created_event.created_at if created_event else memory.created_at
    steps.append(
        Step(
            anchor="lin-applied",
            kind="applied",
            label="applied",
            text=f"Written to the store as this memory (version 1) on {when_text(created_at)}.",
            when=created_at,
            actor=created_event.changed_by if created_event else (proposal.decided_by or ""),
            quote=_clip(created_event.new_content)
            if created_event and created_event.new_content != memory.content
            else None,
            quote_label="original text",
            links=[Link("audit row", f"#h-{created_event.id}")] if created_event else [],
            tone="ok",
        )
    )
    later = _history_steps(memory, history, cold, by_id) + _targeting_steps(memory, proposals)
    later.sort(key=lambda step: step.when or memory.created_at)
    return steps + later


def _raw_story(memory, history, cold, proposals, derived, jobs, calls, triples) -> list[Step]:
    by_id = {p.id: p for p in proposals}
    created_event = next((h for h in history if h.event == "created"), None)
    writer = created_event.changed_by if created_event else (memory.who or "someone")
    actor_type = created_event.actor_type if created_event else "agent"
    who = f" (who: {memory.who})" if memory.who and memory.who != writer else ""
    why = f" Why: “{memory.why}”." if memory.why else ""
    steps = [
        Step(
            anchor="lin-raw",
            kind="raw",
            label="raw memory",
            text=(
                f"Written by {writer} ({actor_type}){who} on {when_text(memory.created_at)}, "
                f"for agent {memory.agent_id}.{why}"
            ),
            when=memory.created_at,
            actor=writer,
            links=[Link("audit row", f"#h-{created_event.id}")] if created_event else [],
        )
    ]
    derived_by_id = {m.id: m for m in derived}
    own = [p for p in proposals if p.source_memory_id == memory.id]
    by_job: dict[str, list] = defaultdict(list)
    for proposal in own:
        by_job[proposal.job_id].append(proposal)
    if not jobs and memory.extraction_status == "none":
        steps.append(
            Step("lin-nojob", "job", "no extraction",
                 "No extraction job: it was stored without going through the pipeline.", tone="muted")
        )  # fmt: skip
    for job in jobs:
        text, tone = _job_sentence(job, calls, "this raw memory")
        steps.append(
            Step(
                anchor=f"lin-job-{wording.short_id(job.id)}",
                kind="job",
                label="extraction",
                text=f"{text[0].upper()}{text[1:]}",
                when=job.completed_at or job.failed_at or job.created_at,
                actor=((job.result or {}).get("model") or ""),
                links=[_job_link(job.id)],
                tone=tone,
            )
        )
        for proposal in sorted(by_job.get(job.id, []), key=lambda p: p.position):
            fate, outcome, fate_tone = _fate(proposal, derived_by_id)
            candidates = _candidates_sentence(proposal)
            links = [_proposal_link(proposal)]
            made = (
                proposal.created_memory_id
                or proposal.updated_memory_id
                or proposal.deleted_memory_id
            )
            if made:
                links.append(_memory_link(made))
            if proposal.deduped_existing_id:
                links.append(_memory_link(proposal.deduped_existing_id, "existing memory"))
            elif proposal.target_memory_id and proposal.target_memory_id != made:
                links.append(_memory_link(proposal.target_memory_id, "target"))
            steps.append(
                Step(
                    anchor=f"lin-fact-{wording.short_id(proposal.id)}",
                    kind="fact",
                    label=f"fact → {proposal.action.upper()}",
                    text=(
                        f"Fact #{proposal.position + 1} ({proposal.fact_type}, "
                        f"{_pct(proposal.fact_confidence)} confidence). {candidates} "
                        f"{_decision_sentence(proposal)}"
                    ),
                    when=proposal.created_at,
                    actor=proposal.model,
                    quote=_clip(proposal.fact_content),
                    quote_label="fact",
                    outcome=outcome,
                    fate=fate,
                    links=links,
                    tone=fate_tone,
                )
            )
        counts = triples.get(job.id)
        if counts:
            total = sum(counts.values())
            parts = ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
            steps.append(
                Step(
                    anchor=f"lin-triples-{wording.short_id(job.id)}",
                    kind="triples",
                    label="entity triples",
                    text=(
                        f"The extraction also found {_plural(total, 'entity triple')} for the graph: "
                        f"{parts}. Only approved triples create entities and mentions."
                    ),
                    when=job.completed_at or job.created_at,
                    links=[_job_link(job.id, "#triples")],
                    tone="warn" if counts.get("pending") else "muted",
                )
            )
    later = _history_steps(memory, history, cold, by_id) + _targeting_steps(memory, proposals)
    later.sort(key=lambda step: step.when or memory.created_at)
    return steps + later


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
        proposals = _proposals_of(memory)
    if memory.is_derived:
        if source is None and memory.source_id:
            source = Memory.objects.filter(id=memory.source_id).first()
        source_created = (
            MemoryHistory.objects.filter(memory_id=source.id, event="created")
            .order_by("created_at", "id")
            .first()
            if source is not None
            else None
        )
        creator = next((p for p in proposals if p.created_memory_id == memory.id), None)
        job, calls = None, {}
        if creator is not None:
            job = Job.objects.filter(id=creator.job_id).first()
            calls = _calls_by_job([creator.job_id])
        return _derived_story(memory, history, cold, proposals, source, source_created, job, calls)
    if derived is None:
        derived = list(Memory.objects.filter(source_id=memory.id, source_type=DERIVED))
    jobs = list(Job.objects.filter(memory_id=memory.id).order_by("created_at", "id"))
    calls = _calls_by_job([job.id for job in jobs])
    triples = _triple_counts(memory)
    return _raw_story(memory, history, cold, proposals, derived, jobs, calls, triples)
