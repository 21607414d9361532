"""A purge's writes, each one short transaction: the purge itself (the store's rows and the
domain's erased and a `purged` tombstone filed under each memory's id), the scrub of copies a
verification found, and the receipt kept with the tombstone. What each step does to each field
is the PLACES table (pipeline.erasure); pipeline.purge decides what to purge and verifies."""

from __future__ import annotations

from dataclasses import dataclass, field

from django.db import transaction
from django.utils import timezone

from memory.batch import history_row, insert_rows
from memory.erasure import PURGED_EVENT, Copies, Texts
from memory.erasure_rows import (
    STORE_LISTS,
    StorePlan,
    erase_store_in_transaction,
    plan_store,
    scrub_copies_in_transaction,
    stop_jobs_in_transaction,
)
from memory.models import Memory, MemoryHistory
from memory.writes import Actor
from pipeline.erasure import (
    PIPELINE_LISTS,
    PLACES,
    PipelinePlan,
    erase_pipeline_in_transaction,
    plan_pipeline,
)

WRITE_CHUNK = 500  # memories a purge erases in one transaction


@dataclass
class Written:
    """What a purge wrote: the memories, rows per table, their tombstones and vectors."""

    memory_ids: list[str]
    store: StorePlan
    pipeline: PipelinePlan
    tombstones: dict[str, str] = field(default_factory=dict)  # memory id -> history id

    @property
    def rows(self) -> dict[str, int]:
        merged = {**self.store.rows()}
        for table, n in self.pipeline.rows().items():
            merged[table] = merged.get(table, 0) + n
        return dict(sorted(merged.items()))

    @property
    def tombstone(self) -> str | None:
        """The tombstone that keeps the receipt: the first memory's."""
        return self.tombstones[self.memory_ids[0]] if self.memory_ids else None

    def merged(self, other: Written) -> Written:
        """This purge and a later part of it (the next WRITE_CHUNK memories) as one."""
        store, more = self.store, other.store
        pipeline, extra = self.pipeline, other.pipeline
        return Written(
            [*self.memory_ids, *other.memory_ids],
            StorePlan(
                [*store.memory_ids, *more.memory_ids],
                relations=store.relations + more.relations,
                **{name: getattr(store, name) + getattr(more, name) for name in STORE_LISTS},
            ),
            PipelinePlan(
                **{name: getattr(pipeline, name) + getattr(extra, name) for name in PIPELINE_LISTS}
            ),
            {**self.tombstones, **other.tombstones},
        )


def plan(memory_ids: list[str], texts: Texts) -> Written:
    """What purging these memories would write (reads only, WRITE_CHUNK memories at a time):
    the dry run's answer, and each part of a purge's."""
    written = None
    for start in range(0, len(memory_ids), WRITE_CHUNK):
        ids = memory_ids[start : start + WRITE_CHUNK]
        store = plan_store(ids, list(texts.needles))
        part = Written(store.memory_ids, store, plan_pipeline(store.memory_ids, store.job_ids))
        written = part if written is None else written.merged(part)
    return written or Written([], StorePlan([]), PipelinePlan())


def purge(
    memory_ids: list[str],
    texts: Texts,
    *,
    reason: str,
    actor: Actor,
    scope: str,
    receipt_id: str | None = None,
) -> Written:
    """One transaction: the planned rows erased (planned again under the lock, so the plan is the
    store as it is), then a tombstone for each memory with the purger, the reason and the counts."""
    with transaction.atomic():
        live = sorted(
            Memory.objects.filter(id__in=memory_ids, purged_at__isnull=True).values_list(
                "id", flat=True
            )
        )
        now = timezone.now()
        stop_jobs_in_transaction(live, at=now)
        written = plan(live, texts)
        erase_store_in_transaction(written.store, texts, by=actor.name, at=now)
        erase_pipeline_in_transaction(written.pipeline, texts, at=now, by=actor.name)
        counts = written.rows
        rows = [
            history_row(
                memory_id,
                PURGED_EVENT,
                actor=actor,
                reason=reason,
                metadata={"scope": scope, "memories": len(live), "counts": counts},
                at=now,
            )
            for memory_id in live
        ]
        for row in rows:  # every tombstone names the one that keeps the receipt
            row.metadata["receiptId"] = receipt_id or rows[0].id
        insert_rows(MemoryHistory, rows)
        written.tombstones = {row.memory_id: row.id for row in rows}
    return written


def scrub_copies(copies: dict[str, Copies], texts: Texts) -> dict[str, int]:
    """Copies of the purged texts a verification found, scrubbed in place (rows per table)."""
    with transaction.atomic():
        return scrub_copies_in_transaction(PLACES, copies, texts)


def keep_receipt(tombstone_id: str, receipt: dict) -> None:
    """The receipt, kept in the metadata of the tombstone it names."""
    with transaction.atomic():
        row = MemoryHistory.objects.select_for_update().get(id=tombstone_id)
        MemoryHistory.objects.filter(id=tombstone_id).update(
            metadata={**row.metadata, "receipt": receipt}
        )
