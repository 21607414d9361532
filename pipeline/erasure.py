"""Where memory text lives beyond the store: the domain's tables and the framework's, added to
memory.erasure's STORE_PLACES into PLACES, the one table of every model field that can hold
memory text or a vector (tests/test_erasure_places.py fails when a model gains a text or JSON
field that is not in it); and the domain's rows of purged memories, found (`plan_pipeline`) and
wiped (`erase_pipeline_in_transaction`, inside the caller's transaction)."""

from __future__ import annotations

from dataclasses import dataclass, field

from django.contrib.admin.models import LogEntry
from django.contrib.contenttypes.models import ContentType
from django.db import connection
from django.db.models import Q

from memory.erasure import PURGED, STORE_PLACES, How, Place, Texts, scrub, text_values_purged
from memory.models import Job, Memory, MemoryHistory
from pipeline.models import (
    OPEN,
    Approval,
    ApprovalOutcome,
    LlmCall,
    Proposal,
    ProposalStatus,
    RejectionFingerprint,
    ReplayRun,
    TripleReview,
)

P, L, R = "pipeline.Proposal", "pipeline.LlmCall", "pipeline.ReplayRun"
_WORDS = "an id, a word, a name or a number"


def _kept(model: str, names: str, note: str = _WORDS) -> list[Place]:
    return [Place(model, name, How.KEPT, note) for name in names.split()]


PIPELINE_PLACES: list[Place] = [
    Place(P, "fact_content", How.REPLACED, "the extracted fact"),
    Place(P, "target_content", How.REPLACED, "the target memory's text at decision time"),
    Place(P, "reason", How.REPLACED, "the model's reason, which quotes the text"),
    Place(P, "review_note", How.REPLACED, "a reviewer's note"),
    Place(P, "applied_content", How.REPLACED, "the text a reviewer applied"),
    Place(P, "candidates", How.TEXT_VALUES, "the candidate memories' texts (ids kept)"),
    Place(P, "grounding", How.EMPTIED, "spans of the raw memory"),
    Place(P, "safety", How.TEXT_VALUES, "findings with their matched text (kinds kept)"),
    Place(P, "contradiction", How.TEXT_VALUES, "the detector's evidence"),
    Place(
        P,
        "fingerprint",
        How.REHASHED,
        "SHA-256 of the fact: emptied",
        of="fact_content",
        hasher="empty",
    ),
    *_kept(P, "id agent_id action fact_type status blocked_reason skipped_reason model"),
    *_kept(P, "prompt_version mode decided_by applied_as safety_kinds reverted_by"),
    Place(L, "prompt", How.REPLACED, "what the model saw"),
    Place(L, "raw_response", How.REPLACED, "what the model said"),
    Place(L, "error", How.SCRUBBED, "may quote a reply"),
    *_kept(L, "kind provider model"),
    Place(
        "pipeline.RejectionFingerprint",
        "fingerprint",
        How.DELETED,
        "a rejected fact's hash",
        text=False,
    ),
    *_kept("pipeline.RejectionFingerprint", "agent_id"),
    *[
        Place("pipeline.TripleReview", name, How.DELETED, "a triple extracted from the raw memory")
        for name in ("source", "relationship", "target", "note")
    ],
    *_kept("pipeline.TripleReview", "source_type target_type status decided_by"),
    Place(R, "results", How.SCRUBBED, "second opinions: a purged proposal's entry is removed"),
    Place(R, "filters", How.SCRUBBED, "the queue filter asked for (may hold a search)"),
    Place(R, "error", How.SCRUBBED, "may quote a reply"),
    *_kept(R, "id requested_by provider model proposal_ids status"),
    Place("pipeline.EvalRun", "set_text", How.SCRUBBED, "a reviewed set holds the team's facts"),
    Place(
        "pipeline.EvalRun",
        "set_sha256",
        How.REHASHED,
        "SHA-256 of the set",
        of="set_text",
        hasher="sha256",
    ),
    *[
        Place("pipeline.EvalRun", name, How.SCRUBBED, "an evaluation's cases and errors")
        for name in ("report", "counts", "error")
    ],
    *_kept(
        "pipeline.EvalRun",
        "id requested_by set_kind set_name selection provider model prompt_version",
    ),
    *_kept("pipeline.EvalRun", "status worker"),
    Place("pipeline.Approval", "content", How.REPLACED, "the text a first approval approved"),
    Place("pipeline.Approval", "note", How.REPLACED, "a reviewer's note with an approval"),
    *_kept("pipeline.Approval", "action by ended_by outcome"),
    *_kept("pipeline.Claim", "by page", "who is reviewing a proposal, and on which page"),
    Place("pipeline.ImportRun", "report", How.SCRUBBED, "an import's per-line report"),
    Place("pipeline.ImportRun", "error", How.SCRUBBED, "why an import failed (may quote a line)"),
    *_kept(
        "pipeline.ImportRun",
        "upload",
        "an uploaded file, held only while its import runs and dropped when it ends; not searched: "
        "every receipt names a file being imported as out of reach",
    ),
    *_kept("pipeline.ImportRun", "id requested_by origin file_name format agent status worker"),
    Place("pipeline.EvalResult", "outcome", How.SCRUBBED, "one case's outcome"),
    *_kept(
        "pipeline.ConfigChange", "changed_by before after reason", "flags and a person's reason"
    ),
    Place("pipeline.SavedQueue", "filters", How.SCRUBBED, "a queue's filter (may hold a search)"),
    *_kept("pipeline.SavedQueue", "name slug guidelines", "a team's words"),
    Place("pipeline.DigestRun", "payload", How.SCRUBBED, "the digest sent (ids and counts)"),
    *_kept("pipeline.DigestRun", "id email_status email_error webhook_status webhook_error"),
]

FRAMEWORK_PLACES: list[Place] = [
    Place(
        "admin.LogEntry",
        "object_repr",
        How.REPLACED,
        "an admin change's label: a memory's first 80 characters, a proposal's fact",
    ),
    Place("admin.LogEntry", "change_message", How.SCRUBBED, "the fields an admin changed"),
    *_kept("admin.LogEntry", "object_id"),
    *_kept("auth.Permission", "name codename"),
    *_kept("auth.Group", "name"),
    *_kept("auth.User", "password username first_name last_name email", "a person's account"),
    *_kept("contenttypes.ContentType", "app_label model"),
    *_kept("sessions.Session", "session_key session_data", "a sign-in and its flash notices"),
    *[
        place
        for model in ("django_q.Task", "django_q.Success", "django_q.Failure")
        for place in _kept(
            model,
            "id name func hook group cluster args kwargs result",
            "queued calls: task names, ids and statuses",
        )
    ],
    *_kept(
        "django_q.Schedule",
        "name func hook args kwargs schedule_type cron task cluster intended_date_kwarg",
        "the maintenance schedule",
    ),
    *_kept("django_q.OrmQ", "key payload", "a queued call's ids"),
    *_kept("dashboard.LoginThrottle", "key", "a user name or an address"),
]

# The one table: every model field that can hold memory text or a vector, with how a purge
# clears it, and the indexes and files that mirror them.
PLACES: list[Place] = [*STORE_PLACES, *PIPELINE_PLACES, *FRAMEWORK_PLACES]

# Proposal fields a purged proposal loses (REPLACED / EMPTIED / TEXT_VALUES), in one UPDATE.
_REPLACED = ("fact_content", "target_content", "reason", "review_note", "applied_content")
_TEXT_VALUES = ("candidates", "safety", "contradiction")


PIPELINE_LISTS = (
    "proposals",
    "targeting",
    "calls",
    "other_calls",
    "other_jobs",
    "other_audits",
    "fingerprints",
    "triples",
    "replays",
    "log_entries",
    "memory_ids",
    "foreign",
    "reasons",
)


@dataclass
class PipelinePlan:
    """The domain's rows a purge of these memories touches, as ids per table."""

    proposals: list[str] = field(default_factory=list)  # made from a purged memory: wiped
    targeting: list[str] = field(default_factory=list)  # point at one: its text scrubbed
    calls: list[int] = field(default_factory=list)  # the purged memories' jobs' calls: wiped
    other_calls: list[int] = field(default_factory=list)  # calls of the targeting jobs: scrubbed
    other_jobs: list[str] = field(default_factory=list)  # jobs of the targeting proposals
    # The audits of memories that stay about those proposals (decision audits, what they made).
    other_audits: list[str] = field(default_factory=list)
    memory_ids: list[str] = field(default_factory=list)  # the purged memories
    foreign: list[str] = field(default_factory=list)  # the proposals of memories that stay
    # (proposal id, the model's reason) of every proposal above: a reason may quote any part of
    # a purged text, so its copies go wherever it was copied.
    reasons: list[tuple[str, str]] = field(default_factory=list)
    fingerprints: list[int] = field(default_factory=list)
    triples: list[int] = field(default_factory=list)
    replays: list[str] = field(default_factory=list)
    log_entries: list[int] = field(default_factory=list)

    def rows(self) -> dict[str, int]:
        counts = {
            Proposal._meta.db_table: len(self.proposals) + len(self.targeting),
            LlmCall._meta.db_table: len(self.calls) + len(self.other_calls),
            RejectionFingerprint._meta.db_table: len(self.fingerprints),
            TripleReview._meta.db_table: len(self.triples),
            ReplayRun._meta.db_table: len(self.replays),
            LogEntry._meta.db_table: len(self.log_entries),
            MemoryHistory._meta.db_table: len(self.other_audits),
            Job._meta.db_table: len(self.other_jobs),
        }
        return {table: n for table, n in counts.items() if n}


def plan_pipeline(memory_ids: list[str], job_ids: list[str]) -> PipelinePlan:
    """The domain's rows of these memories (reads only)."""
    plan = PipelinePlan(memory_ids=list(memory_ids))
    made = Q(source_memory_id__in=memory_ids) | Q(created_memory_id__in=memory_ids)
    made |= Q(updated_memory_id__in=memory_ids)
    plan.proposals = sorted(Proposal.objects.filter(made).values_list("id", flat=True))
    pointing = (
        Q(target_memory_id__in=memory_ids)
        | Q(deleted_memory_id__in=memory_ids)
        | Q(deduped_existing_id__in=memory_ids)
    )
    plan.targeting = sorted(
        Proposal.objects.filter(pointing)
        .exclude(id__in=plan.proposals)
        .values_list("id", flat=True)
    )
    # Proposals of other raw memories (an UPDATE that wrote a purged memory's text, one that only
    # points at it): their jobs' results, model calls and decision audits hold copies.
    foreign = list(
        Proposal.objects.filter(id__in=[*plan.proposals, *plan.targeting])
        .exclude(source_memory_id__in=memory_ids)
        .values_list("id", "job_id", "source_memory_id")
    )
    plan.other_jobs = sorted({job for _, job, _ in foreign} - set(job_ids))
    plan.calls = list(LlmCall.objects.filter(job_id__in=job_ids).values_list("pk", flat=True))
    plan.other_calls = list(
        LlmCall.objects.filter(job_id__in=plan.other_jobs).values_list("pk", flat=True)
    )
    plan.foreign = sorted(pid for pid, _, _ in foreign)
    wanted = {*plan.proposals, *plan.targeting}
    rows = list(
        Proposal.objects.filter(id__in=wanted).values_list(
            "id", "reason", "created_memory_id", "updated_memory_id", "deleted_memory_id"
        )
    )
    plan.reasons = [(pid, reason) for pid, reason, *_ in rows if reason and reason != PURGED]
    # The audits about them on memories that stay: the decision audits on the raw memories, and
    # the audits of what they made, changed or deleted ("keep both", an approved UPDATE).
    holders = {source for _, _, source in foreign}
    holders |= {memory for *_, a, b, c in rows for memory in (a, b, c) if memory}
    plan.other_audits = [
        pk
        for pk, metadata in MemoryHistory.objects.filter(
            memory_id__in=holders - set(memory_ids)
        ).values_list("id", "metadata")
        if isinstance(metadata, dict) and metadata.get("proposalId") in wanted
    ]
    plan.fingerprints = list(
        RejectionFingerprint.objects.filter(proposal_id__in=plan.proposals).values_list(
            "pk", flat=True
        )
    )
    plan.triples = list(
        TripleReview.objects.filter(source_memory_id__in=memory_ids).values_list("pk", flat=True)
    )
    touched = set(plan.proposals) | set(plan.targeting)
    plan.replays = [
        pk
        for pk, results in ReplayRun.objects.values_list("id", "results")
        if any(isinstance(r, dict) and r.get("proposal") in touched for r in results or [])
    ]
    plan.log_entries = _log_entries(memory_ids, plan.proposals)
    return plan


def _log_entries(memory_ids: list[str], proposal_ids: list[str]) -> list[int]:
    kinds = ContentType.objects.get_for_models(Memory, Proposal)
    query = Q(content_type=kinds[Memory], object_id__in=memory_ids)
    query |= Q(content_type=kinds[Proposal], object_id__in=proposal_ids)
    return list(LogEntry.objects.filter(query).values_list("pk", flat=True))


def erase_pipeline_in_transaction(plan: PipelinePlan, texts: Texts, *, at, by: str) -> None:
    """Wipe the planned rows: a purged memory's proposals keep their ids, action, status and who
    decided, and lose every text; the rows that only point at one lose the copies they hold.
    A purged memory's open proposals (pending, skipped, stale) leave the queue, cancelled: their
    fact is gone, so no reviewer could decide them (they stood there as "[purged]", counted as
    waiting). So do the open ones that would change or delete a purged memory: it can never come
    back, so an approval could only find it gone. A first approval waiting for its second ends
    with them (`by` the purger), as cancelled."""
    _wipe_proposals(plan.proposals)
    open_ones = Proposal.objects.filter(id__in=[*plan.proposals, *plan.targeting], status__in=OPEN)
    Approval.objects.filter(proposal__in=open_ones, outcome=ApprovalOutcome.OPEN).update(
        outcome=ApprovalOutcome.CANCELLED, ended_by=by, ended_at=at
    )
    open_ones.update(status=ProposalStatus.CANCELLED, updated_at=at)
    _scrub_rows(Proposal, plan.targeting, [*_REPLACED, *_TEXT_VALUES], texts)
    _replace_reasons(plan)
    Proposal.objects.filter(id__in=plan.targeting).exclude(target_content=None).update(
        target_content=PURGED
    )
    LlmCall.objects.filter(pk__in=plan.calls).update(prompt=PURGED, raw_response=PURGED)
    # A purged proposal's approvals lose their text like the proposal; others' lose copies.
    Approval.objects.filter(proposal_id__in=plan.proposals).update(content=PURGED)
    Approval.objects.filter(proposal_id__in=plan.proposals).exclude(note="").update(note=PURGED)
    _scrub_rows(
        Approval,
        list(Approval.objects.filter(proposal_id__in=plan.targeting).values_list("pk", flat=True)),
        ["content", "note"],
        texts,
    )
    _scrub_rows(LlmCall, plan.calls, ["error"], texts)
    _scrub_rows(LlmCall, plan.other_calls, ["prompt", "raw_response", "error"], texts)
    _scrub_rows(MemoryHistory, plan.other_audits, ["metadata", "reason"], texts)
    _scrub_rows(Job, plan.other_jobs, ["result", "error"], texts)
    RejectionFingerprint.objects.filter(pk__in=plan.fingerprints).delete()
    TripleReview.objects.filter(pk__in=plan.triples).delete()
    gone = set(plan.proposals)
    for run in ReplayRun.objects.filter(pk__in=plan.replays):
        kept = [r for r in run.results if r.get("proposal") not in gone]
        ReplayRun.objects.filter(pk=run.pk).update(results=scrub(kept, texts))
    LogEntry.objects.filter(pk__in=plan.log_entries).update(object_repr=PURGED)
    _scrub_rows(LogEntry, plan.log_entries, ["change_message"], texts)


def _chunks(items: list, size: int = 500):
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _decide_calls(ids: list[str]) -> list[int]:
    """The decide calls that made these proposals: each proposal's fact index is its call's,
    matched here (one OR term a proposal would pass SQLite's depth), 500 proposals at a time."""
    found = []
    for part in _chunks(ids):
        made = set(Proposal.objects.filter(id__in=part).values_list("job_id", "position"))
        calls = LlmCall.objects.filter(
            job_id__in={job for job, _ in made}, kind="decide"
        ).values_list("pk", "job_id", "fact_index")
        found += [pk for pk, job, index in calls if (job, index) in made]
    return found


def _reason_audits(plan: PipelinePlan) -> list[tuple[str, str, str | None]]:
    """(pk, proposal id, reason) of the audits about the plan's proposals: on the purged memories
    and on those that stay (plan.other_audits)."""
    ids = {pid for pid, _ in plan.reasons}
    found = []
    for name, part in [
        *(("memory_id__in", part) for part in _chunks(plan.memory_ids)),
        *(("pk__in", part) for part in _chunks(plan.other_audits)),
    ]:
        for pk, metadata, reason in MemoryHistory.objects.filter(**{name: part}).values_list(
            "pk", "metadata", "reason"
        ):
            proposal = metadata.get("proposalId") if isinstance(metadata, dict) else None
            if proposal in ids and reason:
                found.append((pk, proposal, reason))
    return found


def _replace_reasons(plan: PipelinePlan) -> None:
    """The model's reason for a proposal that made, changed or points at a purged memory may quote
    any part of it ("from walrus-4417 to ..."), which no search for the whole text finds: it is
    replaced wherever it was copied. The proposal's own, the model's reply and second opinions
    are the model's words: replaced whole. In an audit it is cut out of the audit's reason
    ("approved: [purged]"), so a reviewer's own words there stay."""
    if not plan.reasons:
        return
    ids = {pid for pid, _ in plan.reasons}
    for part in _chunks(plan.targeting):
        Proposal.objects.filter(id__in=part).update(reason=PURGED)
    needles = {pid: Texts.of([reason]) for pid, reason in plan.reasons}
    cuts = [
        MemoryHistory(pk=pk, reason=cut)
        for pk, proposal, reason in _reason_audits(plan)
        if (cut := scrub(reason, needles[proposal])) != reason
    ]
    MemoryHistory.objects.bulk_update(cuts, ["reason"], batch_size=500)  # not one a row
    for part in _chunks(_decide_calls(plan.foreign)):
        LlmCall.objects.filter(pk__in=part).update(raw_response=PURGED)
    for part in _chunks(plan.other_jobs):
        for pk, result in Job.objects.filter(pk__in=part).values_list("pk", "result"):
            listed = result.get("proposals") if isinstance(result, dict) else None
            entries = [e for e in listed or [] if isinstance(e, dict) and e.get("id") in ids]
            if any(e.get("reason") not in (None, "", PURGED) for e in entries):
                for entry in entries:
                    entry["reason"] = PURGED
                Job.objects.filter(pk=pk).update(result=result)
    for pk, results in ReplayRun.objects.filter(pk__in=plan.replays).values_list("pk", "results"):
        for entry in results or []:
            if isinstance(entry, dict) and entry.get("proposal") in ids:
                for side in (entry.get("original"), entry.get("other")):
                    if isinstance(side, dict):
                        side.update({k: PURGED for k in ("reason", "raw") if side.get(k)})
        ReplayRun.objects.filter(pk=pk).update(results=results)


def reasons_left(plan: PipelinePlan) -> list[tuple[str, int]]:
    """Where the model's reason for one of the plan's proposals is still found (the purge's
    check: a quoted fragment is found by no search for the purged texts)."""
    if not plan.reasons:
        return []
    said = dict(plan.reasons)
    left = sum(
        Proposal.objects.filter(id__in=part).exclude(reason=PURGED).exclude(reason="").count()
        for part in _chunks(list(said))
    )
    replies = sum(
        LlmCall.objects.filter(pk__in=part).exclude(raw_response=PURGED).count()
        for part in _chunks(_decide_calls(plan.foreign))
    )
    kept = sum(1 for _, pid, reason in _reason_audits(plan) if said[pid] in reason)
    named = [
        ("pipeline_proposals.reason (the model's, about a purged memory)", left),
        ("pipeline_llm_calls.raw_response of their decide calls", replies),
        ("memory_history.reason (quoting the model's reason about a purged memory)", kept),
    ]
    return [(where, n) for where, n in named if n]


def _wipe_proposals(ids: list[str]) -> None:
    if not ids:
        return
    rows = Proposal.objects.filter(id__in=ids).values_list("id", *_REPLACED, *_TEXT_VALUES)
    names = (*_REPLACED, *_TEXT_VALUES, "grounding", "fingerprint")
    fields = [Proposal._meta.get_field(name) for name in names]
    changed = []
    for pk, *values in rows:
        wiped = [None if v is None else PURGED for v in values[: len(_REPLACED)]]
        wiped += [text_values_purged(v) for v in values[len(_REPLACED) :]]
        wiped += [[], ""]
        prepared = [f.get_db_prep_save(v, connection) for f, v in zip(fields, wiped, strict=True)]
        changed.append([*prepared, pk])
    columns = ", ".join(f"{f.column} = %s" for f in fields)
    with connection.cursor() as cursor:
        cursor.executemany(f"UPDATE pipeline_proposals SET {columns} WHERE id = %s", changed)


def _scrub_rows(model, pks: list, names: list[str], texts: Texts) -> None:
    """Replace copies of the texts in these fields of these rows (only rows that hold one)."""
    if not pks or not texts:
        return
    for pk, *values in model._default_manager.filter(pk__in=pks).values_list("pk", *names):
        changes = {
            name: scrub(value, texts)
            for name, value in zip(names, values, strict=True)
            if texts.held_in(value)
        }
        if changes:
            model._default_manager.filter(pk=pk).update(**changes)
