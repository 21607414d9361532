"""What happened to a memory after it was made: its own audit trail (edits, reverts, forgets,
recoveries, superseded versions) and the proposals from other raw memories that aimed at it."""

from __future__ import annotations

from dashboard import wording
from dashboard.lineage.sentences import decider, edited, fate, relabelled
from dashboard.lineage.steps import (
    Link,
    Step,
    audit_link,
    clip,
    job_link,
    memory_link,
    proposal_link,
)
from memory.models import Memory, MemoryCold, MemoryHistory

# Audit rows already told through the proposals they belong to, or noise in a story.
TOLD_ELSEWHERE = {"created", "none", "reviewed"}
# What a revert (or its undo) left behind, by the audit event it wrote.
REVERT_RESULTS = {
    "updated": "the previous text is back",
    "deleted": "this memory was forgotten (soft delete)",
    "recovered": "this memory is back",
}


def later_steps(memory: Memory, history: list, cold: list, proposals: list) -> list[Step]:
    """Everything that happened since the memory was made, in time order."""
    by_id = {p.id: p for p in proposals}
    later = history_steps(history, cold, by_id) + targeting_steps(memory, proposals)
    later.sort(key=lambda step: step.when or memory.created_at)
    return later


# --- the memory's own audit trail -----------------------------------------------------------------


def history_steps(history: list[MemoryHistory], cold: list[MemoryCold], by_id: dict) -> list[Step]:
    """Later events of the memory's own audit trail (not its creation, not pipeline audits)."""
    snapshots = {(snap.version, snap.archived_at): snap for snap in cold}
    steps: list[Step] = []
    for event in history:
        if event.event in TOLD_ELSEWHERE:
            continue
        meta = event.metadata if isinstance(event.metadata, dict) else {}
        steps.append(_event_step(event, meta, by_id.get(meta.get("proposalId"))))
        snap = snapshots.get(((meta.get("version") or 0) - 1, event.created_at))
        if event.event == "updated" and snap is not None:
            steps.append(_superseded_step(snap))
    return steps


def _event_step(event: MemoryHistory, meta: dict, proposal) -> Step:
    """One audit event as a step: a revert or its undo, an update, a forget, a recovery, other."""
    reason = f": “{event.reason}”" if event.reason else ""
    quote, quote_label = None, ""
    if meta.get("revert") or meta.get("undoRevert"):
        text, extra = _revert_text(event, meta, proposal, reason), []
        kind, label, tone = "reverted", "reverted", "warn"
        if meta.get("undoRevert"):
            label, tone = "revert undone", "ok"
    elif event.event == "updated":
        text, extra = _update_text(event, meta, proposal, reason)
        kind, label, tone = "updated", "updated", "ok"
        if event.new_content is not None:
            quote, quote_label = clip(event.new_content), "new text"
    elif event.event == "deleted":
        text, extra = _delete_text(event, proposal, reason)
        kind, label, tone = "deleted", "deleted", "bad"
    elif event.event == "recovered":
        text, extra = f"Recovered by {event.changed_by}{reason}.", []
        kind, label, tone = "recovered", "recovered", "ok"
    else:
        text = f"{event.event.replace('_', ' ').capitalize()} by {event.changed_by}{reason}."
        extra = [job_link(meta["jobId"])] if meta.get("jobId") else []
        kind, label, tone = event.event, event.event.replace("_", " "), "muted"
    links = [proposal_link(proposal)] if proposal else []
    return Step(
        anchor=f"lin-h-{wording.short_id(event.id)}",
        kind=kind,
        label=label,
        text=text,
        when=event.created_at,
        actor=event.changed_by,
        quote=quote,
        quote_label=quote_label,
        links=[*links, *extra, audit_link(event)],
        tone=tone,
    )


def _revert_text(event: MemoryHistory, meta: dict, proposal, reason: str) -> str:
    """The sentence of a revert, or of the undo of one, and what it left behind."""
    what = proposal.applied_action.upper() if proposal else "change"
    done = REVERT_RESULTS.get(event.event, event.event)
    if meta.get("undoRevert"):
        if event.event == "updated":  # the proposal's text is back, not the one before it
            done = "the text it applied is back"
        return f"{event.changed_by} undid the revert of the {what}: {done}{reason}."
    return f"Reverted by {event.changed_by}: the {what} was undone and {done}{reason}."


def _update_text(event: MemoryHistory, meta: dict, proposal, reason: str) -> tuple[str, list[Link]]:
    """(sentence, extra links) of an update: by a later proposal, or a person's edit."""
    version = meta.get("version")
    if proposal is None:
        changes = meta.get("changes")
        if isinstance(changes, dict) and changes and not meta.get("contentChanged"):
            what = wording.field_changes(changes)  # the values before and after, not just names
        else:
            what = f"{', '.join(meta.get('changedFields') or []) or 'fields'} changed"
        return (
            f"Edited by {event.changed_by} ({event.actor_type}): {what}, "
            f"now version {version}{reason}.",
            [],
        )
    source = proposal.source_memory_id
    text = (
        f"Updated to version {version} by {proposal_link(proposal).label} "
        f"(UPDATE from raw memory {wording.short_id(source)}), {decider(proposal, event)}"
        f"{' (text edited by the reviewer)' if edited(proposal) else ''}.{relabelled(proposal)}"
    )
    return text, [memory_link(source, f"raw memory {wording.short_id(source)}")]


def _delete_text(event: MemoryHistory, proposal, reason: str) -> tuple[str, list[Link]]:
    """(sentence, extra links) of a forget: by a later proposal, or a person's soft delete."""
    if proposal is None:
        return f"Forgotten (soft delete) by {event.changed_by}{reason}.", []
    text = (
        f"Forgotten by {proposal_link(proposal).label} (DELETE from raw memory "
        f"{wording.short_id(proposal.source_memory_id)}), {decider(proposal, event)}."
        f"{relabelled(proposal)}"
    )
    return text, [memory_link(proposal.source_memory_id, "raw memory")]


def _superseded_step(snap: MemoryCold) -> Step:
    """The version an update replaced, kept whole in the cold tier."""
    return Step(
        anchor=f"lin-cold-{wording.short_id(snap.archive_id)}",
        kind="superseded",
        label="superseded",
        text=(
            f"Version {snap.version} was superseded; its full row is kept in the cold "
            f"tier (archived as “{snap.archived_reason}”)."
        ),
        when=snap.archived_at,
        quote=clip(snap.content),
        quote_label=f"version {snap.version}",
        links=[Link("cold tier", "#cold")],
        tone="muted",
    )


# --- proposals from other raw memories ------------------------------------------------------------


def targeting_steps(memory: Memory, proposals: list) -> list[Step]:
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
        if proposal.deduped_existing_id == memory.id and proposal.target_memory_id != memory.id:
            steps.append(_same_fact_step(proposal))
        else:
            steps.append(_targeted_step(proposal))
    return steps


def _targeting_links(proposal) -> list[Link]:
    """Links to a proposal that aimed at the memory and to the raw memory it came from."""
    return [
        proposal_link(proposal),
        memory_link(
            proposal.source_memory_id,
            f"raw memory {wording.short_id(proposal.source_memory_id)}",
        ),
    ]


def _same_fact_step(proposal) -> Step:
    """Another raw memory gave the same fact again, deduplicated into this memory."""
    text = (
        f"Raw memory {wording.short_id(proposal.source_memory_id)} produced the same fact again; "
        f"it was deduplicated into this memory."
    )
    return Step(
        anchor=f"lin-target-{wording.short_id(proposal.id)}",
        kind="deduped",
        label="same fact again",
        text=text,
        when=proposal.created_at,
        actor=proposal.model,
        links=_targeting_links(proposal),
        tone="muted",
    )


def _targeted_step(proposal) -> Step:
    """A proposal from another raw memory to change this one (or NONE: nothing to change)."""
    told, outcome, tone = fate(proposal, {})
    if proposal.contradicting_none:
        # Not "said this again": its fact contradicts this memory, and a reviewer decides.
        text = (
            f"Raw memory {wording.short_id(proposal.source_memory_id)} contradicts this memory; "
            f"{proposal.model} decided NONE (nothing to change), so a reviewer decides."
        )
    elif proposal.action == "none":
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
    return Step(
        anchor=f"lin-target-{wording.short_id(proposal.id)}",
        kind="targeted",
        label=f"{proposal.action.upper()} proposed",
        text=text,
        when=proposal.created_at,
        actor=proposal.model,
        quote=clip(proposal.fact_content)
        if proposal.action != "none" or proposal.contradicting_none
        else None,
        quote_label="proposed text"
        if proposal.action == "update"
        else "the contradicting fact"
        if proposal.contradicting_none
        else "",
        outcome=outcome,
        fate=told,
        links=_targeting_links(proposal),
        tone=tone,
    )
