"""The two-person rule (review.destructiveApprovals): which changes need approvals from two
different reviewers, and where a proposal stands. The approve and reject writes keep it
(pipeline.writes.approvals); the job's write leaves such a change for review in full mode."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from django.db.models import Q

from memory.content import normalize
from memory.models import Authority, Memory, holding
from pipeline.config import get_config
from pipeline.models import Action, Approval, ApprovalOutcome, Proposal

# The blocked reason of a change full mode leaves for two reviewers instead of applying it.
TWO_PERSON_RULE = "two_person_rule"


def needs_two(action: str, target: Memory | None, setting: int) -> bool:
    """With the setting at 2: every DELETE, and an UPDATE of a pinned memory or of one a person
    asserted. `action` is the one applied (a "keep both" of a DELETE is an ADD: one approval)."""
    if setting < 2:
        return False
    if action == Action.DELETE:
        return True
    return (
        action == Action.UPDATE
        and target is not None
        and (target.pinned or target.asserted_by == Authority.PERSON)
    )


def needs_two_q(setting: int) -> Q:
    """needs_two() as a condition on Proposal, for counting a queue (the proposed action)."""
    if setting < 2:
        return Q(pk__in=[])
    changes_protected = Q(target_memory__pinned=True) | Q(
        target_memory__asserted_by=Authority.PERSON
    )
    return Q(action=Action.DELETE) | (Q(action=Action.UPDATE) & changes_protected)


def retiring(proposals: Iterable[Proposal], setting: int | None = None) -> set[str]:
    """The UPDATEs among these whose text another memory of their agent already holds (as
    memory.models.holding finds it): approving one retires its target, a DELETE, so it needs
    two approvals as a DELETE does. One query; none when the rule is off (`setting`: the
    configured review.destructiveApprovals when not given). A list page passes its rows here
    once and puts the answer in its context as `retiring`: each row's badge reads it."""
    if setting is None:
        setting = get_config().destructive_approvals
    if setting < 2:
        return set()
    wanted = {
        p.id: (p.agent_id, normalize(p.fact_content).hash, p.target_memory_id)
        for p in proposals
        if p.action == Action.UPDATE and p.target_memory_id and p.fact_content
    }
    if not wanted:
        return set()
    held = holding(
        {agent for agent, _, _ in wanted.values()}, {text for _, text, _ in wanted.values()}
    ).values_list("agent_id", "content_hash", "id")
    holders: dict[tuple[str, str], set[str]] = {}
    for agent, text, memory_id in held:
        holders.setdefault((agent, text), set()).add(memory_id)
    return {
        pid
        for pid, (agent, text, target) in wanted.items()
        if holders.get((agent, text), set()) - {target}
    }


def open_approvals(proposal: Proposal) -> list[Approval]:
    """The approvals of the round still waiting (uses the queue's prefetch when it is there)."""
    return [approval for approval in proposal.approvals.all() if approval.is_open]


def check_rename(reviewer: str) -> None:
    """Refuse renaming a reviewer whose first approvals wait for a second: renamed, they would
    count as another reviewer and could give the second themselves (the two-person rule knows
    reviewers by name). ValueError with a sentence for the admin."""
    waiting = Approval.objects.filter(by=reviewer, outcome=ApprovalOutcome.OPEN).count()
    if waiting:
        which = "proposal that waits" if waiting == 1 else "proposals that wait"
        raise ValueError(
            f"{reviewer!r} gave the first of two approvals to {waiting} {which} for a second "
            "reviewer: renamed, they would count as another reviewer and could give the second. "
            "Ask them to withdraw those approvals (or let another reviewer decide them), or keep "
            "the name."
        )


def awaits_another_reviewer(proposal_id: str, reviewer: str) -> bool:
    """Whether `reviewer` gave this proposal the first of its two approvals and it waits for
    someone else's (one query; the claims read it: such a reviewer's claim would only keep the
    second reviewer away)."""
    return Approval.objects.filter(
        proposal_id=proposal_id, by=reviewer, outcome=ApprovalOutcome.OPEN
    ).exists()


def awaiting_another(proposals, reviewer: str) -> set[str]:
    """Of these proposals (a queryset or ids), those `reviewer` gave the first of two approvals
    and that wait for someone else's: approving them again is refused (same_approver)."""
    if not reviewer:
        return set()
    return set(
        Approval.objects.filter(
            proposal__in=proposals, by=reviewer, outcome=ApprovalOutcome.OPEN
        ).values_list("proposal_id", flat=True)
    )


@dataclass(frozen=True)
class Standing:
    """Where a proposal stands under the rule, for one reviewer: how many approvals it needs,
    who approved it so far in this round, and whether this reviewer is one of them."""

    needed: int
    approvals: tuple[Approval, ...]
    mine: bool

    @property
    def count(self) -> int:
        return len(self.approvals)

    @property
    def waiting(self) -> bool:
        """A first approval is recorded: the next (different) reviewer's approval applies it."""
        return self.count > 0

    @property
    def next_number(self) -> int:
        """The approval this reviewer's would be: "Approve (2 of 2)"."""
        return self.count + 1


def standing(
    proposal: Proposal, setting: int, reviewer: str | None, retires: bool = False
) -> Standing:
    """The proposal's standing for `reviewer` (reads target_memory and the approvals);
    `retires`: it is among `retiring`, an UPDATE approving which is a DELETE."""
    if not proposal.can_approve:
        return Standing(1, (), False)  # decided (or only rejectable): nothing to count
    current = tuple(open_approvals(proposal))
    action = Action.DELETE if retires else proposal.action
    # As the approval itself counts (pipeline.writes.review): a round the rule opened (whatever
    # the first approved: "delete the old one", a text that retires the target) needs a second,
    # different reviewer while the rule is on; once it is turned off, any approval completes
    # it, its first approver's too (a QA pass: the queue said "1 of 2" and offered no Approve,
    # while the card applied it).
    two = (bool(current) and setting >= 2) or (
        proposal.is_destructive and needs_two(action, proposal.target_memory, setting)
    )
    mine = two and any(a.by == reviewer for a in current)
    return Standing(2 if two else 1, current, mine)
