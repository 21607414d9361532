"""What the dashboard says about decisions: outcome notes, refusals as capitalised sentences with a
next step, and why a proposal is waiting, in words rather than codes."""

from __future__ import annotations

from django.utils.text import capfirst

from memory.writes import Refused
from pipeline import safety
from pipeline.config import FROZEN
from pipeline.models import Action, Proposal, ProposalStatus
from pipeline.review import Decision


def short_id(identifier: str | None) -> str:
    """The 8 hex digits that tell ids apart at a glance: the random tail of the UUID. Row ids are
    time-ordered (version 7), so their first digits are the same for everything made within a
    minute; the link or title next to a short id carries the whole one."""
    return (identifier or "")[-8:]


# What a reviewer can do next, by refusal code (the message itself says what happened).
NEXT_STEPS = {
    "already_decided": "Reload the queue to see what is still waiting.",
    "already_reverted": "Open the proposal to undo the revert.",
    "duplicate_content_hash": "Use “Keep both” or “Delete the old one” instead.",
    "source_forgotten": "Reject it, or recover the raw memory first.",
    "not_found": "Reload the page.",
    "version_conflict": "Reload the page and decide again.",
    "no_snapshot": "Open the memory and edit it by hand.",
    "pinned_requires_force": "Tick “pinned: apply anyway” and decide again to confirm.",
    "same_approver": "Ask another reviewer to approve it, or reject it.",
    # approval_differs: its message says what to do.
}

# Why a pending proposal was held when the pipeline recorded it (Proposal.blocked_reason).
WAITING = {
    "shadow_mode": "held for review: shadow mode writes nothing by itself",
    "mutations_frozen": "held: the emergency brake was on when it was recorded",
    "destructive_mutations_disabled": "waits for a reviewer: this mode never applies UPDATE or "
    "DELETE by itself",
    "contradiction_review": "waits for a reviewer: it contradicts an existing memory",
    "pinned_target": "waits for a reviewer: the memory it changes is pinned",
    "person_asserted": "waits for a reviewer: a person asserted the memory it changes",
    "two_person_rule": "waits for two reviewers: the two-person rule holds every DELETE and "
    "every change to a pinned or person-asserted memory",
    "safety_review": "waits for a reviewer: a safety finding",
    "target_changed": "stale: the memory it changes was edited since the decision",
    "target_deleted": "stale: the memory it changes was deleted since the decision",
    "source_changed": "stale: its raw memory was edited since the job read it",
}
# Who asserted a memory (Memory.asserted_by), in sentences: "Asserted by a person."
AUTHORITY = {"person": "a person", "agent": "an agent", "model": "the model", "import": "an import"}


def asserted_by(memory, history=()) -> str:
    """'Asserted by a person.' (the memory's authority as it is now); with its `history`, once an
    edit of its text moved who asserts it, said as now: 'Its text was edited since: now ...'."""
    who = AUTHORITY.get(memory.asserted_by, memory.asserted_by)
    edited = any(h.event == "updated" and (h.metadata or {}).get("contentChanged") for h in history)
    return f"Its text was edited since: now asserted by {who}." if edited else f"Asserted by {who}."


# What an approval did to the memory, by the action it applied.
APPLIED_VERB = {Action.ADD: "added", Action.UPDATE: "updated", Action.DELETE: "deleted"}
FROZEN_NOW = "held: the emergency brake is on, nobody can apply it until an admin lifts it"
BRAKE_LIFTED = (
    "waits for a reviewer: recorded while the emergency brake was on; the brake is lifted now"
)
FINDING_REDACTED = "waits for a reviewer: held for a safety finding, redacted since"
# An htmx request arrived without a session (dashboard.access.session_ended): nothing was done.
SESSION_ENDED = "Your session ended — sign in again. Nothing was saved."


# "Done 3 approved of 4": the past tense of a bulk decision.
BULK_DONE = {Decision.APPROVE: "approved", Decision.REJECT: "rejected"}


def bulk_toast(decision: str, progress: dict) -> str:
    """The toast at the end of a bulk decision: what was done, and what was not."""
    done, failed, claimed = progress["done"], progress["failed"], progress["claimed"]
    parts = [f"Bulk: {done} {BULK_DONE[decision]}"]
    if progress["awaiting"]:
        parts.append(f"{progress['awaiting']} of them as the first of two approvals")
    if failed:
        # Refused, each for its reason (the bulk panel lists them): a brake, a stale target, a
        # secret; not all of them wait for a decision one by one (a QA pass).
        parts.append(f"{failed} not {BULK_DONE[decision]}: the panel says why")
    if claimed:
        parts.append(
            f"{claimed} skipped: someone else is reviewing {'it' if claimed == 1 else 'them'}"
        )
    if yours := progress.get("yours"):
        wait = "waits" if yours == 1 else "wait"
        parts.append(f"{yours} you approved already {wait} for another reviewer")
    return ", ".join(parts) + "."


def bulk_gone(count: int, deciders: list[str]) -> str:
    """Why a bulk action decided fewer than it confirmed: they had gone when their turn came."""
    if count <= 0:
        return ""
    were = "was" if count == 1 else "were"
    if deciders:
        return f"{count} {were} no longer waiting when their turn came: decided by {', '.join(deciders)}."
    return (
        f"{count} {were} no longer waiting as counted when their turn came: another reviewer "
        f"decided or changed {'it' if count == 1 else 'them'} first, or "
        f"{'it' if count == 1 else 'they'} left the filter."
    )


def bulk_arrived(count: int) -> str:
    """The proposals that matched the filter only after the preview counted it: not decided."""
    if count <= 0:
        return ""
    were = "proposal matches" if count == 1 else "proposals match"
    return f"{count} {were} the filter since the preview and {'was' if count == 1 else 'were'} left for review."


def queue_end(fresh: int) -> str:
    """What j or n say on the queue's last page: the end, and what arrived on earlier pages."""
    if not fresh:
        return "End of the queue: this is the last page."
    return (
        f"End of the queue: this is the last page. {fresh} new proposal{'' if fresh == 1 else 's'} "
        f"arrived on the pages before it — go to the first page."
    )


def mode_note(mode: str | None) -> str:
    """A word on a recorded mode at decision (a proposal's mode, a job's writeMode) that needs one."""
    return "the emergency brake was on: nothing was written" if mode == FROZEN else ""


def sentence(text: str) -> str:
    text = capfirst((text or "").strip())
    return text if not text or text[-1] in ".?!" else text + "."


def refusal(refused: Refused) -> str:
    """The refusal as a sentence, followed by what to do next when the message does not say."""
    text = sentence(refused.message)
    if refused.code == "duplicate_content_hash" and refused.details.get("duplicateMemoryId"):
        text = f"{text[:-1]} (memory {short_id(refused.details['duplicateMemoryId'])})."
    step = NEXT_STEPS.get(refused.code)
    if (
        refused.code == "already_decided"
        and refused.details.get("currentStatus") == ProposalStatus.STALE
    ):
        step = None  # the message already says: compare and re-decide
    return f"{text} {step}" if step else text


def waiting(proposal: Proposal, brake_on: bool = False) -> str:
    """Why a proposal waits, as it is now: the brake overrides what was recorded at the time
    (in any mode: disabled shows first in the banner, and the brake still holds every apply)."""
    if not proposal.is_open:
        return ""  # decided: nothing holds it any more
    if brake_on:
        return FROZEN_NOW
    reason = proposal.blocked_reason
    if reason == "mutations_frozen":
        return BRAKE_LIFTED  # recorded under the brake, which is off now
    if reason == "safety_review" and not safety.needs_review(proposal.safety):
        return FINDING_REDACTED  # no finding that holds a proposal is left in its text
    return WAITING.get(reason, f"waiting: {reason}") if reason else ""


def relabelled(proposed: str | None, applied: str | None) -> str:
    """Both facts, when a reviewer applied another action than the model proposed; else ""."""
    if not proposed or not applied or proposed == applied:
        return ""
    return f"model proposed {proposed.upper()} · reviewer applied as {applied.upper()}"


def relabel(proposal: Proposal) -> str:
    """relabelled() of a proposal: what the model proposed and what its approval applied."""
    return relabelled(proposal.action, proposal.applied_as)


def approval_relabel(metadata) -> str:
    """relabelled() of a reviewer's approval audit: its proposedAction and the action applied
    (appliedAs; older audits only said appliedAction, and a replace by retiring was a DELETE)."""
    if not isinstance(metadata, dict) or metadata.get("decision") != "approved":
        return ""
    applied = metadata.get("appliedAs") or (
        Action.DELETE if metadata.get("replacedBy") else metadata.get("appliedAction")
    )
    return relabelled(metadata.get("proposedAction"), applied)


def outcome(proposal: Proposal, reviewer: str) -> str:
    """The row note after a reviewer decision, saying what happened to which memory."""
    applied = proposal.applied_action
    kept_both = applied == Action.ADD and proposal.target_memory_id is not None
    if proposal.status == ProposalStatus.APPLIED:
        if applied == Action.DELETE and proposal.deduped_existing_id:
            holder = (
                "its raw memory"
                if proposal.deduped_existing_id == proposal.source_memory_id
                else f"memory {short_id(proposal.deduped_existing_id)}"
            )
            return (
                f"Approved by {reviewer}: replaced. The old memory is retired and its trail "
                f"links to {holder}, which already holds the new text."
            )
        if kept_both:
            return f"Approved by {reviewer}: kept both. The new fact is a memory of its own."
        verb = APPLIED_VERB[applied]
        return f"Approved by {reviewer}: memory {verb}."
    if proposal.status == ProposalStatus.DEDUPED:
        where = (
            "its raw memory"
            if proposal.deduped_existing_id == proposal.source_memory_id
            else f"memory {short_id(proposal.deduped_existing_id)}"
        )
        if kept_both:
            return (
                f"Approved by {reviewer}: kept both. The old memory stays, and the new text is "
                f"already stored as {where}, so nothing new was written."
            )
        return f"Approved by {reviewer}: nothing new was written, {where} already holds this text."
    if proposal.status == ProposalStatus.REJECTED:
        return f"Rejected by {reviewer}: {proposal.review_note}"
    if proposal.awaiting_second_approval:
        return (
            f"Approval 1 of 2 recorded for {reviewer}: a second reviewer's approval applies it "
            "(the two-person rule)."
        )
    return sentence(f"This proposal is {proposal.status}")


def expiry_saved(memory) -> str:
    """What saving a memory's expiry did, for the reviewer."""
    if memory.expires_at is None:
        return f"Expiry lifted (now version {memory.version}): the memory does not expire."
    when = f"{memory.expires_at:%Y-%m-%d %H:%M} UTC"
    if memory.is_expired:
        return (
            f"Expired now (version {memory.version}, expiry {when}): recall and the pipeline no "
            "longer find it. Lift the expiry to bring it back."
        )
    return f"Expires {when} (now version {memory.version}); until then it is found as before."


def redacted(receipt, noun: str) -> str:
    """What a redaction did, and whether its check found a copy left (a pipeline.redaction
    Receipt; `noun` is its kind's, "a password")."""
    marker = f"[redacted:{receipt.kind}]"
    count = len(receipt.memories)
    where = f"{count} memor{'y' if count == 1 else 'ies'}" if count else "its proposal"
    copies = sum(n for table, n in receipt.rows.items() if table != "memories")
    done = f"Redacted {noun}: it reads {marker} in {where} and {copies} other rows."
    if receipt.verified:
        return f"{done} Checked: no copy is left."
    places = ", ".join(f"{item['where']} ({item['count']})" for item in receipt.found)
    return f"{done} The check still found copies: {places}. Open the receipt to see where."


def _shown(value) -> str:
    """A field's value in a change: none, yes/no, a list's items, or as it is."""
    if value is None or value == []:
        return "none"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list):
        return ", ".join(str(item) for item in value)
    return str(value)


def field_changes(changes: dict) -> str:
    """'pinned no → yes; tags none → infra' from an audit row's metadata.changes
    ({field: [before, after]}, memory.field_changes), fields in name order."""
    parts = []
    for name, pair in sorted(changes.items()):
        if isinstance(pair, list) and len(pair) == 2:
            parts.append(f"{name} {_shown(pair[0])} → {_shown(pair[1])}")
        else:
            parts.append(f"{name} {pair}")
    return "; ".join(parts)
