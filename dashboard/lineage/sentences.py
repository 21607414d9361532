"""The sentences both stories share: what an extraction job did, who decided a proposal, and what
became of it."""

from __future__ import annotations

from dashboard import wording
from dashboard.lineage.steps import later_text, pct, plural, prompt_version, when_text
from memory.models import Job, JobStatus, Memory
from pipeline.config import PIPELINE_NAME as PIPELINE
from pipeline.review import RETIRED_REASON

# The order model calls are listed in: the extraction first, then decisions, then embeddings.
CALL_ORDER = {"extract": 0, "decide": 1, "embed": 2}
# Fates whose sentence depends on nothing but the status: (sentence, tone).
FIXED_FATES = {
    "suppressed": (
        "Suppressed: a reviewer had rejected the same proposal before, so it was not queued again.",
        "muted",
    ),
    "recorded": ("Nothing to change: the model decided NONE, and that was recorded.", "muted"),
    "stale": (
        "Stale: its target changed before anyone applied it; waiting for a reviewer to re-decide.",
        "warn",
    ),
}


# --- the extraction job ---------------------------------------------------------------------------


def _extractor(result: dict, entry: dict) -> str:
    """Who extracted (the job's result, else its calls): 'model (via provider)' or 'the model'."""
    model = result.get("model") or next(iter(sorted(entry["models"])), ("", ""))[0]
    provider = result.get("provider") or next(iter(sorted(entry["models"])), ("", ""))[1]
    return f"{model} (via {provider})" if model and provider else (model or "the model")


def _calls_text(kinds: dict[str, int]) -> str:
    """'3 model calls (1 extract, 1 decide, 1 embed)', or 'no model call'."""
    n_calls = sum(kinds.values())
    call_words = ", ".join(
        f"{n} {kind}"
        for kind, n in sorted(kinds.items(), key=lambda i: (CALL_ORDER.get(i[0], 9), i[0]))
    )
    return f"{plural(n_calls, 'model call')} ({call_words})" if n_calls else "no model call"


def _completed_sentence(job: Job, by: str, calls_text: str, source_label: str) -> tuple[str, str]:
    """(sentence, tone) of a completed job: what it extracted, or why it was cancelled."""
    result = job.result or {}
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
        f"(job {wording.short_id(job.id)}{mode_text}): {plural(facts, 'fact')}, "
        f"{plural(triples, 'entity triple')}, {calls_text}.",
        "ok",
    )


def job_sentence(job: Job, calls: dict, source_label: str) -> tuple[str, str]:
    """(sentence, tone) describing an extraction job in plain words."""
    entry = calls.get(job.id) or {"kinds": {}, "models": set()}
    extractor = _extractor(job.result or {}, entry)
    calls_text = _calls_text(entry["kinds"])
    short = wording.short_id(job.id)
    if job.status == JobStatus.COMPLETED:
        return _completed_sentence(job, extractor, calls_text, source_label)
    if job.status == JobStatus.DEAD:
        return (
            f"Extraction job {short} failed after {plural(job.attempts, 'attempt')}: "
            f"{job.error or 'no error recorded'}.",
            "bad",
        )
    if job.status == JobStatus.CANCELLED:
        return (
            f"Extraction job {short} was cancelled: {job.error or 'no reason recorded'}.",
            "muted",
        )
    if job.status == JobStatus.LEASED:
        return (
            f"Extraction job {short} is running (attempt {job.attempts} of {job.max_attempts}).",
            "warn",
        )
    return f"Extraction job {short} is waiting for a worker.", "warn"


# --- the decision and who made it -----------------------------------------------------------------


def by(verb: str, who: str | None, start, end, note: str | None) -> str:
    """'approved by rita 3 minutes later: “matches the wiki”'."""
    words = [verb, "by", who or "a reviewer", later_text(start, end)]
    text = " ".join(word for word in words if word)
    return text + (f": “{note}”" if note else "")


def decider(proposal, event=None) -> str:
    """Who applied the proposal, in words: the pipeline on its own, or the approving reviewer.

    Given `event`, the audit row one application wrote, its own actor, time and note: a decision
    undone and made again by someone else is two applications, each by its own reviewer (the
    proposal names only the latest)."""
    who = event.changed_by if event else proposal.decided_by
    approvals = (
        event.metadata.get("approvals") if event and isinstance(event.metadata, dict) else None
    )
    if isinstance(approvals, list) and len(approvals) == 2:  # the two-person rule: both named
        who = f"{approvals[0]}, then {approvals[1]} (two approvals)"
    if who == PIPELINE:
        return f"applied automatically by {PIPELINE} in {proposal.mode} mode, with no human review"
    when = event.created_at if event else proposal.decided_at
    note = _note_of(event, proposal) if event else proposal.review_note
    return by("approved", who, proposal.created_at, when, note)


def _note_of(event, proposal) -> str | None:
    """The reviewer's note an application's audit row carries; None for the reason the write
    fills in without one (the model's own reason, as is or after "approved: ")."""
    if event.reason in (proposal.reason, f"approved: {proposal.reason}"):
        return None
    if (event.reason or "").startswith(RETIRED_REASON):  # _retire_for's, without a note
        return None
    return event.reason


def relabelled(proposal) -> str:
    """The sentence " Model proposed UPDATE · reviewer applied as DELETE." when the action a
    reviewer applied is not the model's, else "" (wording.relabel)."""
    both = wording.relabel(proposal)
    return f" {both[0].upper()}{both[1:]}." if both else ""


def edited(proposal) -> bool:
    """Whether the reviewer changed the model's text before it was applied."""
    return bool(proposal.applied_content) and proposal.applied_content != proposal.fact_content


def candidates_sentence(proposal) -> str:
    """What hybrid search found to compare the fact with, and how close the closest one was."""
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


def decision_sentence(proposal) -> str:
    """What the model (or the pipeline, with nothing to compare) decided, how sure, which mode."""
    target = (
        f" memory {wording.short_id(proposal.target_memory_id)}"
        if proposal.target_memory_id
        else ""
    )
    if not proposal.candidates and proposal.action == "add":
        return (
            f"With nothing to compare it with, the pipeline proposed ADD without a decision call, "
            f"at the fact's own {pct(proposal.confidence)} confidence, in {proposal.mode} mode."
        )
    return (
        f"{proposal.model} (prompt {prompt_version(proposal)}) decided "
        f"{proposal.action.upper()}{target} "
        f"with {pct(proposal.confidence)} confidence, in {proposal.mode} mode."
    )


# --- what became of a proposal --------------------------------------------------------------------


def _applied_fate(proposal, derived: dict[str, Memory]) -> tuple[str, str, str]:
    """(fate, sentence, tone) of an applied proposal: what it made or changed, and any revert."""
    decided = decider(proposal)
    was_edited = " (text edited by the reviewer)" if edited(proposal) else ""
    undone = by("reverted", proposal.reverted_by, proposal.decided_at, proposal.reverted_at, None)
    reverted = f" Later {undone}." if proposal.reverted_at else ""
    told = "reverted" if proposal.reverted_at else "applied"
    tone = "warn" if proposal.reverted_at else "ok"
    both = relabelled(proposal)
    if proposal.created_memory_id:
        made = derived.get(proposal.created_memory_id)
        gone = " It has since been forgotten." if made and made.is_deleted else ""
        return (
            told,
            f"Became memory {wording.short_id(proposal.created_memory_id)}, "
            f"{decided}{was_edited}.{both}{reverted}{gone}",
            tone,
        )
    verb = "updated" if proposal.applied_action == "update" else "forgot"
    target = proposal.updated_memory_id or proposal.deleted_memory_id or proposal.target_memory_id
    return (
        told,
        f"{verb.capitalize()} memory {wording.short_id(target)}, "
        f"{decided}{was_edited}.{both}{reverted}",
        tone,
    )


def _deduped_fate(proposal) -> tuple[str, str, str]:
    """(fate, sentence, tone) of a proposal whose fact was already in the store."""
    existing = proposal.deduped_existing_id
    who = (
        f", {decider(proposal)}" if proposal.decided_by and proposal.decided_by != PIPELINE else ""
    )
    return (
        "deduped",
        f"Already in the store as memory {wording.short_id(existing)}: deduplicated, "
        f"nothing new written{who}.{relabelled(proposal)}",
        "muted",
    )


def fate(proposal, derived: dict[str, Memory]) -> tuple[str, str, str]:
    """(fate, sentence, tone) of a proposal from a raw memory."""
    status = proposal.status
    if status == "applied":
        return _applied_fate(proposal, derived)
    if status == "pending":
        why = f" ({proposal.blocked_reason.replace('_', ' ')})" if proposal.blocked_reason else ""
        flag = " The contradiction detector flagged it." if proposal.review_needed else ""
        return "pending", f"Waiting for a reviewer{why}.{flag}", "warn"
    if status == "rejected":
        rejected = by(
            "Rejected",
            proposal.decided_by,
            proposal.created_at,
            proposal.decided_at,
            proposal.review_note,
        )
        return "rejected", f"{rejected}.", "bad"
    if status == "deduped":
        return _deduped_fate(proposal)
    if status == "skipped":
        why = (proposal.skipped_reason or "no reason").replace("_", " ")
        return "skipped", f"Skipped ({why}); a reviewer can still approve it.", "muted"
    if status in FIXED_FATES:
        sentence, tone = FIXED_FATES[status]
        return status, sentence, tone
    return status, f"{status.capitalize()}.", "muted"
