"""Purge: the one deliberate exception to "never lost" (DESIGN §1). An admin names what goes (one
memory, a raw memory with its lineage, every memory of an agent, every memory holding a text) and
why; the purge erases every copy of those memories' texts (the PLACES table of pipeline.erasure),
then verifies it and answers with an erasure receipt, kept with the `purged` tombstone. A purge
that cannot show that nothing is left is reported as failed, never as done.

`purge` takes a request from an interface (the API, the dashboard, `manage.py purge`, through
pipeline.review); `purge_memories` is the one entry for "purge these memory ids with this reason
by this actor" that other domain code (expiry) calls. Neither calls a model.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from enum import StrEnum

from django.db.models import Q, TextField
from django.db.models.functions import Cast

from memory import vectors
from memory.backend import erasure as files
from memory.erasure import MIN_NEEDLE, Texts, find_copies
from memory.erasure_parts import quoted_part
from memory.erasure_rows import store_leftovers, texts_of
from memory.models import DERIVED_SOURCE_TYPE, Memory, MemoryHistory
from memory.writes import Actor, Refused
from pipeline import safety
from pipeline.erasure import PLACES, reasons_left
from pipeline.models import Proposal, ProposalStatus
from pipeline.writes import purge as purge_writes
from pipeline.writes.purge import Written

NOTHING_MATCHES = "no memory that is not purged already matches"
SENSITIVE = safety.REDACTABLE_KINDS  # findings a purge's reason may not hold (kept for good)
REPAIR_ROUNDS = 2  # copies a verification found are scrubbed and the store checked again


class Scope(StrEnum):
    MEMORY = "memory"  # one memory
    LINEAGE = "lineage"  # a raw memory and everything derived from it
    AGENT = "agent"  # every memory of one agent
    TEXT = "text"  # every memory holding a text (a leaked key)


@dataclass(frozen=True)
class Request:
    """What an admin asked to purge: a scope and its one argument."""

    scope: Scope
    memory_id: str | None = None
    agent: str | None = None
    text: str | None = None


OUT_OF_REACH = [
    "backups and copies of the database or the data folder made before the purge",
    "the model server's own logs and caches (what Ollama or an OpenAI-compatible server kept "
    "of the prompts it saw)",
    "copies outside the store: what agents recalled or people copied before the purge, digests "
    "and webhooks already sent",
    "freed blocks of the file system and the disk (an SSD may keep old blocks until it reuses "
    "them)",
    "the memory of processes running now (search caches) until they restart",
    "a file being imported right now (an import's upload, dropped when its run ends): an import "
    "that holds the text can write it again, so purge again after it",
]


@dataclass
class Receipt:
    """What a purge did and what its verification found (`as_json` is the API's shape)."""

    dry_run: bool
    memories: list[str]
    rows: dict[str, int]
    verified: bool = False
    found: list[dict] = field(default_factory=list)
    # Copies the first check found outside the purge's own rows, scrubbed and checked again.
    repaired: list[dict] = field(default_factory=list)
    out_of_reach: list[str] = field(default_factory=list)
    tombstone: str | None = None
    checks: list[str] = field(default_factory=list)  # what was verified, in words
    # Memories derived from a purged raw memory that stay (a purge of one memory, not its
    # lineage): their own texts may say what it said.
    derived_kept: list[str] = field(default_factory=list)

    @property
    def status(self) -> str:
        return "dry run" if self.dry_run else "done" if self.verified else "failed"

    def as_json(self) -> dict:
        return {
            "dryRun": self.dry_run,
            "memories": self.memories,
            "rows": self.rows,
            "verified": self.verified,
            "found": self.found,
            "repaired": self.repaired,
            "outOfReach": self.out_of_reach,
            "tombstone": self.tombstone,
            "derivedKept": self.derived_kept,
        }


# --- what a request names ------------------------------------------------------------------------


def required_reason(reason, doing: str = "purged") -> str:
    """The reason given, stripped; refused when there is none (`doing`: what it explains)."""
    if not isinstance(reason, str) or not reason.strip():
        raise Refused("reason_required", f"a reason is required: say why this is {doing}")
    return reason.strip()


def memory_ids_for(request: Request) -> list[str]:
    """The memories a request names, not purged yet, or Refused saying what is wrong with it."""
    if request.scope in {Scope.MEMORY, Scope.LINEAGE}:
        memory = Memory.objects.filter(id=request.memory_id or "").first()
        if memory is None:
            raise Refused("not_found", f"memory {request.memory_id} not found")
        if memory.is_purged:
            raise Refused("already_purged", f"memory {memory.id} was purged already")
        ids = [memory.id] + (lineage_of(memory.id) if request.scope == Scope.LINEAGE else [])
    elif request.scope == Scope.AGENT:
        agent = (request.agent or "").strip()
        if not agent:
            raise Refused("invalid_scope", "agent must name an agent")
        agents = Memory.objects.filter(agent_id=agent)
        if not agents.exists():
            raise Refused("unknown_agent", f"no memory was ever written for agent '{agent}'")
        ids = list(agents.filter(purged_at__isnull=True).values_list("id", flat=True))
    elif request.scope == Scope.TEXT:
        ids = holding_text(request.text)
        if not ids:
            raise _held_earlier(request.text.strip())
    else:
        raise Refused("invalid_scope", f"unknown scope '{request.scope}'")
    ids = sorted(set(ids))
    if not ids:
        raise Refused("nothing_to_purge", NOTHING_MATCHES)
    return ids


NAMED = 5  # memories a refusal names by id


def _held_earlier(text: str) -> Refused:
    """The refusal of a text no memory holds now: naming the memories that held it in an
    earlier version (an edit took it out; their history keeps it), when some do, since the
    text is then still in the store (a QA pass read "nothing to purge" as "nothing kept")."""
    rows = (
        MemoryHistory.objects.filter(
            Q(old_content__contains=text) | Q(new_content__contains=text),
            memory__purged_at__isnull=True,
        )
        .order_by("memory_id")
        .values_list("memory_id", "old_content", "new_content")
    )
    held = sorted({pk for pk, old, new in rows if text in (old or "") or text in (new or "")})
    if not held:
        return _held_beside(text)
    named = ", ".join(held[:NAMED]) + (
        f" and {len(held) - NAMED} more" if len(held) > NAMED else ""
    )
    return Refused(
        "nothing_to_purge",
        "no memory holds this text now, but an earlier version of "
        f"{'this memory' if len(held) == 1 else f'these {len(held)} memories'} did (an edit "
        f"took it out; the history keeps it): {named}. Purge "
        f"{'it' if len(held) == 1 else 'them'} by id, or redact the text from "
        f"{'it' if len(held) == 1 else 'them'}",
    )


def _held_beside(text: str) -> Refused:
    """The refusal of a text no memory's text holds, now or before: naming the memories whose
    why, tags, sourceId or type hold it (a QA pass was told nothing matched)."""
    held = held_beside(text)
    if not held:
        return Refused("nothing_to_purge", NOTHING_MATCHES)
    named = ", ".join(held[:NAMED]) + (
        f" and {len(held) - NAMED} more" if len(held) > NAMED else ""
    )
    one = len(held) == 1
    return Refused(
        "nothing_to_purge",
        "no memory's text holds this text, but the why, tags, sourceId or type of "
        f"{'this memory' if one else f'these {len(held)} memories'} do: {named}. Purge "
        f"{'it' if one else 'them'} by id",
    )


def lineage_of(memory_id: str) -> list[str]:
    """Everything derived from a raw memory: the memories derived from it and those its applied
    proposals created or updated (an updated memory's text is now the raw memory's fact). Only
    its own agent's: the pipeline derives within one agent, so a memory of another agent naming
    it as its source was not derived from it."""
    agent = Memory.objects.filter(id=memory_id).values_list("agent_id", flat=True).first()
    derived = set(
        Memory.objects.filter(source_id=memory_id, source_type=DERIVED_SOURCE_TYPE).values_list(
            "id", flat=True
        )
    )
    for created, updated in Proposal.objects.filter(
        source_memory_id=memory_id, status=ProposalStatus.APPLIED
    ).values_list("created_memory_id", "updated_memory_id"):
        derived |= {created, updated} - {None}
    live = Memory.objects.filter(id__in=derived, agent_id=agent, purged_at__isnull=True)
    return sorted(live.values_list("id", flat=True))


def holding_text(text) -> list[str]:
    """Every memory not purged yet whose text holds `text` (exactly, as written)."""
    if not isinstance(text, str) or not text.strip():
        raise Refused("empty_text", "text must name what to look for (it is empty)")
    text = text.strip()
    if len(text) < MIN_NEEDLE:
        raise Refused(
            "text_too_short",
            f"text must be at least {MIN_NEEDLE} characters: shorter text is "
            "in nearly every memory",
        )
    candidates = Memory.objects.filter(content__contains=text, purged_at__isnull=True)
    return [pk for pk, content in candidates.values_list("id", "content") if text in content]


def held_beside(text: str) -> list[str]:
    """The memories (not purged) whose own free text beside their text holds `text`: why,
    tags, sourceId or type (not who: the name the trail knows a writer by). A purge by text
    names them rather than erase what they say for a word in their why."""
    as_json = json.dumps(text)[1:-1]  # tags are JSON: a non-ASCII letter is stored escaped
    candidates = (
        Memory.objects.annotate(tags_text=Cast("tags", TextField()))
        .filter(
            Q(why__contains=text)
            | Q(source_id__contains=text)
            | Q(type__contains=text)
            | Q(tags_text__contains=text)
            | Q(tags_text__contains=as_json),
            purged_at__isnull=True,
        )
        .order_by("id")
        .values_list("id", "why", "source_id", "type", "tags")
    )
    return [
        pk
        for pk, *own, tags in candidates
        if any(text in (value or "") for value in own) or any(text in tag for tag in tags or [])
    ]


def texts_for(request: Request, memory_ids: list[str]) -> Texts:
    """The texts a purge erases: every version of every memory it names, and the asked text."""
    return Texts.of([*texts_of(memory_ids), request.text])


# --- purging ------------------------------------------------------------------------------------


def purge(request: Request, *, reason, actor: Actor, dry_run: bool = False) -> Receipt:
    """Purge what the request names (Refused, with nothing written, for a bad request). A dry
    run writes nothing and answers what would go."""
    reason = required_reason(reason)
    ids = memory_ids_for(request)
    texts = texts_for(request, ids)
    if texts.held_in(reason) or any(f.kind in SENSITIVE for f in safety.scan(reason)):
        raise Refused(
            "reason_holds_text",
            "the reason repeats what is being purged (or holds a secret or personal data), and "
            "it is kept: describe it instead",
        )
    if (part := quoted_part(reason, texts)) is not None:
        raise Refused(
            "reason_holds_text",
            f"the reason repeats part of what is being purged ({part!r}), and it is kept: "
            "describe it instead",
        )
    # What the memory's lineage keeps when only the memory goes (a QA pass read "verified" as
    # every sentence gone, while memories derived from it kept theirs word for word).
    kept = (
        [pk for pk in lineage_of(ids[0]) if pk not in ids] if request.scope == Scope.MEMORY else []
    )
    if dry_run:
        receipt = preview(ids, texts)
        receipt.derived_kept = kept
        return receipt
    return purge_memories(
        ids, reason=reason, actor=actor, texts=texts, scope=request.scope, derived_kept=kept
    )


def preview(memory_ids: list[str], texts: Texts) -> Receipt:
    """What purging these memories would erase, rows per table (copies found elsewhere by a scan
    of every place included), and `found`: the copies it would leave, which its check would name
    (a kept memory's own text, why or tags). Nothing written."""
    written = purge_writes.plan(memory_ids, texts)
    rows, left = written.rows, Counter()
    for copies in find_copies(PLACES, texts).values():
        owned = set(_owned(written, copies.model))
        fields = {p.field: p for p in PLACES if p.model == copies.model}
        extra = []
        for pk, names in copies.rows.items():
            if pk in owned:
                continue
            if any(fields[name].elsewhere for name in names):
                extra.append(pk)
            # A kept memory's own text (even in a row whose other copies are scrubbed): the
            # purge's check will name it, as this does.
            left.update(fields[name].where for name in names if not fields[name].elsewhere)
        if extra:
            table = copies_table(copies.model)
            rows[table] = rows.get(table, 0) + len(extra)
    return Receipt(
        True,
        written.memory_ids,
        dict(sorted(rows.items())),
        found=[{"where": where, "count": n} for where, n in sorted(left.items())],
        out_of_reach=out_of_reach(),
    )


def purge_memories(
    memory_ids: list[str],
    *,
    reason: str,
    actor: Actor,
    texts: Texts | None = None,
    scope: str = Scope.MEMORY,
    derived_kept: list[str] = (),
) -> Receipt:
    """Purge these memories with this reason by this actor, verify, keep the receipt with the
    first memory's tombstone and return it. The domain's one entry for a purge. `derived_kept`:
    the memories derived from them that stay (the receipt names them)."""
    reason = required_reason(reason)
    texts = texts if texts is not None else Texts.of(texts_of(memory_ids))
    ids = sorted(set(memory_ids))
    with files.writer_held():
        # A bounded transaction per WRITE_CHUNK memories (an agent may have thousands), every
        # tombstone pointing at the first one, which keeps the receipt; one check of them all.
        written = None
        for start in range(0, len(ids), purge_writes.WRITE_CHUNK):
            part = purge_writes.purge(
                ids[start : start + purge_writes.WRITE_CHUNK],
                texts,
                reason=reason,
                actor=actor,
                scope=scope,
                receipt_id=written.tombstone if written else None,
            )
            written = part if written is None else written.merged(part)
        settled = files.settle(list(written.rows))
    if not written.memory_ids:
        raise Refused("nothing_to_purge", NOTHING_MATCHES)
    matrix_rows = vectors.erase_copies(written.store.embeddings)
    receipt = Receipt(
        False,
        written.memory_ids,
        written.rows,
        tombstone=written.tombstone,
        out_of_reach=out_of_reach(),
        derived_kept=list(derived_kept),
    )
    rounds, first = 0, None
    while True:
        found, copies = verify(written, texts, settled, matrix_rows, receipt)
        first = found if first is None else first
        repairable = {label: c for label, c in copies.items() if _repairable(c)}
        if not repairable or rounds == REPAIR_ROUNDS:
            break
        rounds += 1
        with files.writer_held():
            for table, n in purge_writes.scrub_copies(repairable, texts).items():
                receipt.rows[table] = receipt.rows.get(table, 0) + n
            settled = files.settle(list(receipt.rows))
    receipt.found = [{"where": where, "count": n} for where, n in found]
    receipt.repaired = repaired(first, found)
    receipt.verified = not found
    receipt.rows = dict(sorted(receipt.rows.items()))
    purge_writes.keep_receipt(written.tombstone, {**receipt.as_json(), "checks": receipt.checks})
    return receipt


def repaired(first: list[tuple[str, int]], last: list[tuple[str, int]]) -> list[dict]:
    """What the first check found that the last no longer does: the copies scrubbed between
    them (a receipt that said "nothing found" hid them)."""
    left = Counter()
    for where, n in last:
        left[where] += n
    return [{"where": w, "count": n - left[w]} for w, n in first if n > left[w]]


def verify(written: Written, texts: Texts, settled, matrix_rows, receipt: Receipt):
    """Look for what the purge should have removed: the purged rows by id, every place of the
    table by text, the vectors by id and, on SQLite, the log, the pages written since the last
    checkpoint and the free pages as bytes. Returns ((where, count) found, the copies by model)."""
    found = list(store_leftovers(written.store, texts))
    found += [(problem, 1) for problem in settled.problems]
    found += reasons_left(written.pipeline)
    copies = find_copies(PLACES, texts)
    for label, found_copies in copies.items():
        for place in PLACES:
            if place.model == label and (n := found_copies.count(place.field)):
                found.append((place.where, n))
    found += vectors.erased(written.store.embeddings, matrix_rows)
    scan = files.scan_files(settled, texts.count_in_bytes)
    found += scan.found
    receipt.checks = _checks(written, texts, settled, scan)
    return found, copies


def _checks(written: Written, texts: Texts, settled, scan) -> list[str]:
    places = sum(1 for place in PLACES if place.scanned)
    count = len(written.memory_ids)
    checks = [
        (f"{count} memories are tombstones" if count != 1 else "the memory is a tombstone")
        + "; audits, cold copies, mentions, relations stated, jobs, vectors and full-text entries checked by id",
        f"{places} fields of {len({p.model for p in PLACES if p.scanned})} tables searched for "
        f"{len(texts.needles)} forms of the purged texts",
    ]
    checks += files.checked(settled, scan)
    return checks


def _repairable(copies) -> bool:
    """Copies a scrub can remove: anywhere but a kept memory's own text (named, not rewritten)."""
    fields = {p.field: p for p in PLACES if p.model == copies.model}
    return any(fields[name].elsewhere for names in copies.rows.values() for name in names)


def _owned(written: Written, label: str) -> list:
    """The primary keys the purge itself already counts in a table."""
    store, pipeline = written.store, written.pipeline
    return {
        "memory.Memory": store.memory_ids,
        "memory.MemoryHistory": [*store.history_ids, *pipeline.other_audits],
        "memory.MemoryCold": store.cold_ids,
        "memory.Job": [*store.job_ids, *pipeline.other_jobs],
        "pipeline.Proposal": [*pipeline.proposals, *pipeline.targeting],
        "pipeline.LlmCall": [*pipeline.calls, *pipeline.other_calls],
    }.get(label, [])


def copies_table(label: str) -> str:
    return next(p.table for p in PLACES if p.model == label)


def out_of_reach() -> list[str]:
    return OUT_OF_REACH + files.out_of_reach()
