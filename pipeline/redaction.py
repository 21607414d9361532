"""Redaction: a reviewer replaces a span of sensitive text (the match of a safety finding whose
kind may be redacted: a secret, a password, personal data, an address) by `[redacted:<kind>]`.

It reaches the memory asked about and its family (its raw memory and everything derived from
it: pipeline.purge.lineage_of), whose texts are rewritten (a new version, hash and normalized
form, a `redacted` audit naming who, why and the kind, never the span nor a hash of it), and
every copy of the span anywhere else (the PLACES table: proposals, audits, model calls, jobs'
results, cold copies, ...), which is scrubbed with the marker, except the records of a memory
outside the family that still holds the span (leave_records_of): they go with its own
redaction. The vectors of the old texts are dropped and the new texts embedded after the commit
(memory_ops.embed_later), so the rest of the text stays findable by its words at once and by its
vector when the worker ran. Then, as a purge does, the files are settled (SQLite: log
checkpointed, FTS and freed bytes zeroed; PostgreSQL: vacuum) and everything is checked again:
the receipt says what was found, and a redaction that cannot show that no copy is left is
reported as failed, never as done. A memory outside the family that holds the same text is not
rewritten: the receipt names it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from django.apps import apps
from django.db.models import Q, QuerySet

from memory import vectors
from memory.backend import erasure as files
from memory.erasure import MIN_NEEDLE, PURGED, Copies, Texts, find_copies, json_forms
from memory.models import Memory, MemoryCold, MemoryHistory
from memory.redaction import (
    MARKER_PREFIX,
    duplicate_after,
    holding,
    leftovers,
    marker,
    redacted_text,
)
from memory.writes import Actor, Refused
from pipeline import memory_ops, safety
from pipeline.erasure import PLACES
from pipeline.models import OPEN, Proposal
from pipeline.purge import (
    REPAIR_ROUNDS,
    copies_table,
    lineage_of,
    out_of_reach,
    repaired,
    required_reason,
)
from pipeline.writes import redact as redact_writes
from pipeline.writes.purge import keep_receipt
from pipeline.writes.redact import Written

SPAN_MAX = 2000  # a span longer than this is not a finding's match: purge the memory instead
# Whose record a row is, by model (the path to its memory): the records of a memory outside the
# family that still holds the span are left to that memory's own redaction, with its text.
RECORD_OF = {
    "memory.Memory": "id",
    "memory.MemoryHistory": "memory_id",
    "memory.MemoryCold": "memory_id",
    "memory.MemoryEntityMention": "memory_id",
    # An entity or a relation one of them mentions or states (a QA pass saw another agent's
    # "billing" renamed while its memory "Omar owns billing." was left as it was).
    "memory.Entity": "memory_mentions__memory_id",
    "memory.Relation": "statements__memory_id",
    "memory.Job": "memory_id",
    "pipeline.Proposal": "source_memory_id",
    "pipeline.LlmCall": "job__memory_id",
    "pipeline.TripleReview": "source_memory_id",
    "pipeline.Approval": "proposal__source_memory_id",
}


@dataclass(frozen=True)
class Request:
    """What a reviewer asked to redact: the exact span, its finding's kind, the memory it is in
    (or, asked from a proposal, the proposal's raw memory, whose fact may hold the span)."""

    memory_id: str
    span: str
    kind: str
    proposal_id: str | None = None
    # An admin may redact any span; a reviewer only a safety finding's (views decide who is who).
    any_span: bool = False


@dataclass
class Planned:
    """A memory the redaction rewrites: its text after, and the memory whose text that equals."""

    memory: Memory
    after: str
    duplicate_of: str | None = None


@dataclass
class Plan:
    """What a redaction would do (the confirmation shows it; nothing is written to make it)."""

    memory: Memory
    span: str
    kind: str
    marker: str
    texts: Texts
    family: list[str]
    memories: list[Planned]
    others: list[str]  # memories outside the family holding the span: named, not rewritten
    copies: dict[str, Copies]
    rows: dict[str, int]


@dataclass
class Receipt:
    """What a redaction did and what its verification found (`as_json` is the API's shape)."""

    kind: str
    memories: list[str]
    rows: dict[str, int]
    event: str
    verified: bool = False
    found: list[dict] = field(default_factory=list)
    # Copies the first check found outside the redaction's own rows, scrubbed and checked again.
    repaired: list[dict] = field(default_factory=list)
    out_of_reach: list[str] = field(default_factory=list)
    others: list[str] = field(default_factory=list)
    duplicates: dict[str, str] = field(default_factory=dict)
    checks: list[str] = field(default_factory=list)

    @property
    def status(self) -> str:
        return "done" if self.verified else "failed"

    def as_json(self) -> dict:
        return {
            "kind": self.kind,
            "memories": self.memories,
            "rows": self.rows,
            "verified": self.verified,
            "found": self.found,
            "repaired": self.repaired,
            "outOfReach": self.out_of_reach,
            "event": self.event,
            "otherMemories": self.others,
            "deletedAsDuplicates": self.duplicates,
        }


# --- what a request names ------------------------------------------------------------------------


def plan(request: Request) -> Plan:
    """The redaction a request names, or Refused (with nothing written) saying what is wrong."""
    memory = Memory.objects.filter(id=request.memory_id or "").first()
    if memory is None:
        raise Refused("not_found", f"memory {request.memory_id} not found")
    if memory.is_purged:
        raise Refused("already_purged", f"memory {memory.id} was purged: nothing is left to redact")
    kind = _kind(request.kind)
    span = _span(request.span)
    texts = Texts.of([span, *json_forms(span)])
    if not _held(memory, span, request.proposal_id):
        raise Refused(
            "span_not_found",
            "neither the memory's text nor an earlier version of it holds this span (exactly as "
            "written): nothing to redact",
        )
    family = family_of(memory)
    if not request.any_span and not _found(span, kind, family, request.proposal_id):
        raise Refused(
            "span_not_a_finding",
            f"the safety scan finds no {kind} that is this span in the texts of this memory and "
            "those derived with it, their earlier versions or the proposal's findings: a "
            "reviewer redacts a finding's span (an admin may redact any text, and purge)",
        )
    changing = holding(family, texts)
    changing.sort(key=lambda pk: (pk != memory.id, pk))
    memories = Memory.objects.in_bulk(changing)
    planned = [
        Planned(m, redacted_text(m, texts, marker(kind)), duplicate_after(m, texts, marker(kind)))
        for m in (memories[pk] for pk in changing)
    ]
    copies = find_copies(PLACES, texts)
    found = copies.get("memory.Memory")
    others = sorted(set(found.rows) - set(family)) if found else []
    copies = leave_records_of(copies, others)
    rows = {Memory._meta.db_table: len(planned)} if planned else {}
    for label, rows_found in copies.items():
        if label != "memory.Memory":
            table = copies_table(label)
            rows[table] = rows.get(table, 0) + len(rows_found.rows)
    return Plan(
        memory,
        span,
        kind,
        marker(kind),
        texts,
        family,
        planned,
        others,
        copies,
        dict(sorted(rows.items())),
    )


def leave_records_of(copies: dict[str, Copies], others: list[str]) -> dict[str, Copies]:
    """`copies` less the rows that are the records of the memories `others` (outside the family,
    their texts still holding the span, so not rewritten): their audit rows, cold copies,
    mentions, jobs, model calls, proposals and approvals. A QA pass found them scrubbed while
    the memory's text kept the span: its trail told a text it never had, with no redaction of
    its own. They are redacted with that memory (the receipt names it, failed until then)."""
    if not others:
        return copies
    kept: dict[str, Copies] = {}
    for label, found in copies.items():
        path = RECORD_OF.get(label)
        theirs = set()
        if path is not None:
            model = apps.get_model(label)
            rows = model.objects.filter(pk__in=list(found.rows), **{f"{path}__in": others})
            theirs = {str(pk) for pk in rows.values_list("pk", flat=True)}
        left = {pk: names for pk, names in found.rows.items() if str(pk) not in theirs}
        if left:
            kept[label] = Copies(label, left)
    return kept


def _kind(kind) -> str:
    if kind not in safety.REDACTABLE_KINDS:
        names = ", ".join(sorted(safety.REDACTABLE_KINDS))
        raise Refused("invalid_kind", f"kind must be one of {names}")
    return kind


def _span(span) -> str:
    if not isinstance(span, str) or not span.strip():
        raise Refused("empty_span", "span must be the text to redact (it is empty)")
    span = span.strip()
    if len(span) < MIN_NEEDLE:
        raise Refused(
            "span_too_short",
            f"span must be at least {MIN_NEEDLE} characters: shorter text is in nearly every "
            "memory and its copies cannot be told apart",
        )
    if len(span) > SPAN_MAX:
        raise Refused("span_too_long", f"span must be at most {SPAN_MAX} characters")
    markers = [marker(name) for name in safety.KINDS] + [PURGED, MARKER_PREFIX]
    if any(form in text for form in Texts.of([span]).needles for text in markers):
        raise Refused("invalid_span", "span is part of the marker that would replace it")
    return span


def _held(memory: Memory, span: str, proposal_id: str | None) -> bool:
    """The span is in the memory's text, or in the fact of its proposal the request came from
    (a proposal named must exist and be about this memory: else not_found)."""
    proposal = None
    if proposal_id:
        proposal = Proposal.objects.filter(id=proposal_id).first()
        if proposal is None or memory.id not in {
            proposal.source_memory_id,
            proposal.target_memory_id,
        }:
            raise Refused("not_found", f"proposal {proposal_id} of memory {memory.id} not found")
    if span in memory.content:
        return True
    texts = (proposal.fact_content, proposal.applied_content) if proposal else ()
    return any(span in (text or "") for text in texts) or _held_before(memory.id, span)


def _found(span: str, kind: str, family: list[str], proposal_id: str | None) -> bool:
    """A finding of `kind` that the span covers (`covers`: its match, as the dashboard's
    "Redact" sends it, or most of it), in the text of a memory of the family or an earlier
    version of it, or among the findings of the proposal named (kept when it was made). A QA pass redacted "staging database" as a
    password, across every agent's records, as a reviewer; a second review then redacted
    "prod", a piece of a password, and every "production" with it."""
    if proposal_id:
        stored = Proposal.objects.filter(id=proposal_id).values_list("safety", flat=True).first()
        if any(_is(finding, span, kind) for finding in stored or [] if isinstance(finding, dict)):
            return True
    texts = list(
        Memory.objects.filter(id__in=family, content__contains=span).values_list(
            "content", flat=True
        )
    )
    texts += _versions(family, span)
    return any(
        finding.kind == kind and covers(finding.match, span)
        for text in texts
        if span in text
        for finding in safety.scan(text)
    )


def _is(finding: dict, span: str, kind: str) -> bool:
    return finding.get("kind") == kind and covers(str(finding.get("match") or ""), span)


def covers(match: str, span: str) -> bool:
    """The span is the finding's match, or most of it in whole words ("12 Birchwood Lane" of
    "12 Birchwood Lane, Leeds"): never a short piece, whose every copy elsewhere would go too."""
    match = match.strip()
    if span == match:
        return True
    at = match.find(span)
    if at < 0 or 2 * len(span) < len(match):
        return False
    before, after = match[at - 1 : at], match[at + len(span) : at + len(span) + 1]
    return not (before.isalnum() or after.isalnum())


def _versions(memory_ids: list[str], span: str) -> list[str]:
    """The memories' earlier texts that hold the span (cold copies, audits' old and new text),
    in two queries however many memories."""
    cold = MemoryCold.objects.filter(memory_id__in=memory_ids, content__contains=span)
    audits = MemoryHistory.objects.filter(memory_id__in=memory_ids).filter(
        Q(old_content__contains=span) | Q(new_content__contains=span)
    )
    found = list(cold.values_list("content", flat=True))
    for old, new in audits.values_list("old_content", "new_content"):
        found += [old or "", new or ""]
    # `contains` ignores case on SQLite: each is checked exactly.
    return [text for text in found if span in text]


def _held_before(memory_id: str, span: str) -> bool:
    """An earlier version of the memory holds the span (a cold copy, an audit's text): an edit
    took it out, which is the first thing people do about a leak, and those copies are still
    to redact (a QA pass found them out of every erasure's reach)."""
    return bool(_versions([memory_id], span))


def family_of(memory: Memory) -> list[str]:
    """The memory, its raw memory when it is derived, and everything derived from either."""
    root = memory.source_id if memory.is_derived and memory.source_id else memory.id
    ids = {memory.id, *lineage_of(memory.id)}
    raw = Memory.objects.filter(id=root, agent_id=memory.agent_id, purged_at__isnull=True)
    if raw.exists():  # the same agent's only, as lineage_of
        ids |= {root, *lineage_of(root)}
    return sorted(ids)


def checked_reason(reason, texts: Texts) -> str:
    reason = required_reason(reason, "redacted")
    if texts.held_in(reason) or any(f.kind in safety.REDACTABLE_KINDS for f in safety.scan(reason)):
        raise Refused(
            "reason_holds_text",
            "the reason repeats what is being redacted (or holds a secret or personal data), "
            "and it is kept: describe it instead",
        )
    return reason


# --- redacting ------------------------------------------------------------------------------------


def redact(request: Request, *, reason, actor: Actor) -> Receipt:
    """Redact what the request names (Refused, with nothing written, for a bad request), verify
    and keep the receipt with the `redacted` event of the memory asked about."""
    planned = plan(request)
    reason = checked_reason(reason, planned.texts)
    texts, replacement = planned.texts, planned.marker
    with files.writer_held():
        written = redact_writes.redact(
            planned.memory.id,
            planned.family,
            planned.copies,
            texts,
            replacement,
            kind=planned.kind,
            reason=reason,
            actor=actor,
        )
        settled = files.settle(list(written.rows) + ["memory_history"])
    matrix_rows = vectors.erase_copies(written.vectors)
    for changed in written.changed:
        if not changed.duplicate_of:
            memory_ops.embed_later(changed.memory_id)
    receipt = Receipt(
        planned.kind,
        [c.memory_id for c in written.changed],
        dict(written.rows),
        written.event,
        out_of_reach=[place.replace("the purge", "the redaction") for place in out_of_reach()],
        duplicates={c.memory_id: c.duplicate_of for c in written.changed if c.duplicate_of},
    )
    rounds, first = 0, None
    while True:
        found, copies = verify(written, texts, settled, matrix_rows, receipt)
        first = found if first is None else first
        repairable = _repairable(leave_records_of(copies, receipt.others))
        if not repairable or rounds == REPAIR_ROUNDS:
            break
        rounds += 1
        with files.writer_held():
            for table, n in redact_writes.scrub_copies(repairable, texts, replacement).items():
                receipt.rows[table] = receipt.rows.get(table, 0) + n
            settled = files.settle(list(receipt.rows))
    receipt.found = [{"where": where, "count": n} for where, n in found]
    receipt.repaired = repaired(first, found)
    receipt.verified = not found
    receipt.rows = dict(sorted(receipt.rows.items()))
    keep_receipt(written.event, {**receipt.as_json(), "checks": receipt.checks})
    return receipt


def verify(written: Written, texts: Texts, settled, matrix_rows, receipt: Receipt):
    """Look for the span everywhere it may be: every place of the table by text (memories
    outside the family included: they are named), the redacted memories' full-text entries,
    the dropped vectors by id and, on SQLite, the log and the pages written since the last
    checkpoint and the free pages as bytes. Returns ((where, count) found, the copies by model)."""
    found = leftovers(written.changed, texts)
    found += [(problem, 1) for problem in settled.problems]
    copies = find_copies(PLACES, texts)
    for label, found_copies in copies.items():
        for place in PLACES:
            if place.model == label and (n := found_copies.count(place.field)):
                found.append((place.where, n))
    held = copies.get("memory.Memory")
    # Outside the family only: a family memory still holding it is among `found` (a QA pass
    # read the redacted memory itself named as another memory).
    family = {changed.memory_id for changed in written.changed}
    receipt.others = sorted(set(held.rows) - family) if held else []
    found += vectors.erased(written.vectors, matrix_rows)
    scan = files.scan_files(settled, texts.count_in_bytes)
    found += scan.found
    places = sum(1 for place in PLACES if place.scanned)
    receipt.checks = [
        f"memories rewritten: {len(written.changed)}; their full-text entries checked, and "
        f"the vectors of their old texts dropped: {len(written.vectors)}",
        f"{places} fields of {len({p.model for p in PLACES if p.scanned})} tables searched for "
        f"{len(texts.needles)} form{'s' if len(texts.needles) != 1 else ''} of the span",
        *files.checked(settled, scan),
    ]
    return found, copies


def _repairable(copies: dict[str, Copies]) -> dict[str, Copies]:
    """Copies a scrub can remove: anywhere but a memory's own text (named, not rewritten)."""
    elsewhere = {(p.model, p.field) for p in PLACES if p.elsewhere}
    return {
        label: found
        for label, found in copies.items()
        if any((label, name) in elsewhere for names in found.rows.values() for name in names)
    }


def open_proposals_rewritten(receipt: Receipt) -> QuerySet:
    """The proposals a reviewer can still decide whose texts this redaction rewrote (made from
    or aimed at a redacted memory, or holding the marker): their rows on a page are stale."""
    marker = f"[redacted:{receipt.kind}]"
    touched = Q(source_memory_id__in=receipt.memories) | Q(target_memory_id__in=receipt.memories)
    touched |= Q(fact_content__contains=marker) | Q(target_content__contains=marker)
    return Proposal.objects.filter(touched, status__in=OPEN)
