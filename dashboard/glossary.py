"""The words the dashboard shows for outcomes and states, each defined once. The glossary page,
the `?` help's link and every status badge's tooltip (the `outcome` template tag) read this table;
a test checks that every proposal and job status word has its entry."""

from __future__ import annotations

from dataclasses import dataclass

from memory.models import JobStatus
from pipeline.models import ProposalStatus
from pipeline.status import BANNERS


@dataclass(frozen=True)
class Section:
    key: str  # the anchor prefix: /glossary/#proposal-stale
    title: str
    words: dict[str, str]  # word -> what it means


PROPOSAL_WORDS = {
    ProposalStatus.PENDING: "Waiting for a reviewer: nothing was written yet. The line under its "
    "reason says why it waits (shadow mode, a contradiction, a pinned target, a safety finding).",
    ProposalStatus.APPLIED: "Written to the memories, by the pipeline (its mode allowed it) or by "
    "a reviewer's approval. Applied work can be reverted from the proposal page.",
    ProposalStatus.REJECTED: "A reviewer said no, with a reason. Nothing was written, and the same "
    "proposal coming again is suppressed.",
    ProposalStatus.SKIPPED: "The pipeline did not apply it by itself: the fact's confidence was "
    "too low, the fact was empty, or the store refused the change (the reason says which). A "
    "reviewer may still approve it.",
    ProposalStatus.DEDUPED: "Nothing new was written because a memory already holds exactly this "
    "text.",
    ProposalStatus.RECORDED: "Kept as a decision only: the model chose NONE (the fact is already "
    "covered), so there was nothing to write.",
    ProposalStatus.STALE: "The memory it changes (or its raw memory) was edited or deleted after "
    "the decision, so it cannot be applied as it is. Compare, then reject it or decide again.",
    ProposalStatus.CANCELLED: "Dropped without a decision: its raw memory, or the memory it would "
    "change, was purged before anyone decided.",
    ProposalStatus.SUPPRESSED: "A reviewer rejected this exact proposal before, so it was not put "
    "in the queue again. Unsuppress puts it back.",
}

JOB_WORDS = {
    JobStatus.PENDING: "Queued: a worker will pick it up.",
    JobStatus.LEASED: "Running: a worker holds it (its lease runs out if the worker dies, and "
    "the job is retried).",
    JobStatus.COMPLETED: "Done: the extraction ran and its proposals were recorded.",
    JobStatus.DEAD: "Failed every attempt: it needs a look and a retry from the jobs page.",
    JobStatus.CANCELLED: "Stopped on purpose (its memory was forgotten, or an admin cancelled it).",
}

BADGE_WORDS = {
    "contradiction": "The new fact contradicts an existing memory (a negation, an opposite "
    "word, the same two things the other way round, or an end of what the memory says): it "
    "always waits for a reviewer.",
    "unsupported": "No sentence of the raw memory supports this fact: check it against the "
    "source before approving.",
    "pinned": "A memory that changes only on purpose: approving a change to it asks to tick "
    "“pinned: apply anyway”.",
    "reverted": "An applied proposal whose change was undone afterwards; the revert can be "
    "undone too.",
    "derived": "A memory the pipeline extracted from a raw memory (as opposed to one an agent or "
    "a person wrote).",
    "two-person": "The two-person rule (review.destructiveApprovals 2): every DELETE, and every "
    "UPDATE of a pinned or person-asserted memory, needs approvals from two different reviewers. "
    "The first is recorded (1 of 2), the second applies it, a rejection by either ends it, and "
    "full mode never applies such a change by itself (it waits with the reason two_person_rule).",
    "reviewing": "Another reviewer focused or opened this proposal and holds it for "
    "review.claimMinutes (5 by default): its buttons are hidden, the keyboard skips it and bulk "
    "actions leave it out. Take over makes it yours (the audit trail records it); the claim ends "
    "with a decision, when its reviewer moves on, or when it expires.",
}

SECTIONS = (
    Section("proposal", "Proposal outcomes", PROPOSAL_WORDS),
    Section("job", "Job states", JOB_WORDS),
    Section("badge", "Badges and other words", BADGE_WORDS),
    Section("mode", "Modes", {key: meaning for key, (_label, meaning) in BANNERS.items()}),
)
BY_KEY = {section.key: section for section in SECTIONS}


def meaning(word: str, section: str = "proposal") -> str:
    """What `word` means in that section of the glossary, or "" when it has no entry."""
    found = BY_KEY.get(section)
    return found.words.get(str(word), "") if found else ""


def anchor(word: str, section: str = "proposal") -> str:
    """The fragment of the glossary page that defines `word`: "proposal-stale"."""
    return f"{section}-{word}"
