"""The store's tables (names as DESIGN §4). Reads live here; every write goes through memory.writes."""

from __future__ import annotations

import os
import time
import uuid

from django.db import DEFAULT_DB_ALIAS, connections, models
from django.db.models import Q
from django.utils import timezone

# source_type of a memory the pipeline derived from a raw one (the pipeline acts under this name).
DERIVED_SOURCE_TYPE = "pipeline-v2"


def new_id() -> str:
    """A new row id: a version 7 UUID (RFC 9562), its first 48 bits the time in milliseconds and
    74 random bits after. Ids made later sort later, so new memories, audits and proposals land on
    the last pages of their primary-key indexes: a job's write of 60 rows dirtied 60 random index
    pages under the write lock with random (version 4) ids, and now a handful."""
    millis = (time.time_ns() // 1_000_000) & ((1 << 48) - 1)
    random = int.from_bytes(os.urandom(10), "big")  # 80 bits: 12 + 62 used
    value = (millis << 80) | (0x7 << 76) | (((random >> 62) & 0xFFF) << 64)  # time, version
    value |= (0b10 << 62) | (random & ((1 << 62) - 1))  # variant, random
    return str(uuid.UUID(int=value))


class RowRead:
    """One row of `model` matching a WHERE clause written in SQL, sent now and read by `get()`:
    in a `memory.backend.pipelined` block several reads go to PostgreSQL in one round trip. For
    reads under the write lock, where the ORM took longer to build a one-row query than the
    database to run it. `lock` locks the row for an update (`_for_update`) on engines that have
    row locks."""

    def __init__(self, model, where: str, params=(), *, lock: bool = False):
        self.model = model
        self.database = connections[model.objects.db]
        sql, self.names, self.converters = _row_read_parts(model, self.database)
        sql += f" WHERE {where}"
        if lock:
            sql += _for_update(self.database)
        self.cursor = self.database.cursor()
        self.cursor.execute(sql, params)

    def get(self):
        """The instance, or None when no row matched (the ORM's conversions applied)."""
        try:
            row = self.cursor.fetchone()
        finally:
            self.cursor.close()
        if row is None:
            return None
        values = list(row)
        for position, (converters, column) in self.converters.items():
            for convert in converters:
                values[position] = convert(values[position], column, self.database)
        return self.model.from_db(self.database.alias, self.names, values)


class RowsRead:
    """The rows of a raw SELECT, sent now and read by `all()` (see RowRead)."""

    def __init__(self, sql: str, params=()):
        self.cursor = connections[DEFAULT_DB_ALIAS].cursor()
        self.cursor.execute(sql, params)

    def all(self) -> list[tuple]:
        try:
            return self.cursor.fetchall()
        finally:
            self.cursor.close()


def lock_rows(model, ids) -> RowsRead | None:
    """Lock several rows of `model` in id order, sent now (read by `all()`): how a write that
    changes several rows of one table takes their locks, so two PostgreSQL writers of the same
    rows wait for each other instead of deadlocking. None when there is one row or none (its own
    FOR UPDATE read locks it) or the engine has no row locks (SQLite's one writer)."""
    ids = sorted(set(ids))
    database = connections[model.objects.db]
    if len(ids) < 2 or not database.features.has_select_for_update:
        return None
    quote = database.ops.quote_name
    key = quote(model._meta.pk.column)
    return RowsRead(
        f"SELECT {key} FROM {quote(model._meta.db_table)} "
        f"WHERE {key} IN ({', '.join(['%s'] * len(ids))}) ORDER BY {key}{_for_update(database)}",
        ids,
    )


def _for_update(database) -> str:
    """The row lock of a write that changes a row but never its key: FOR NO KEY UPDATE where the
    engine has it (PostgreSQL). Writers of the row still take turns; a row another transaction
    inserts pointing at it (its foreign-key check takes FOR KEY SHARE) does not wait, so a job
    holding its source memory cannot deadlock with a job that names that memory as a candidate
    while holding a content lock the first one waits for."""
    if database.features.has_select_for_no_key_update:
        return " FOR NO KEY UPDATE"
    return " FOR UPDATE" if database.features.has_select_for_update else ""


def _row_read_parts(model, database) -> tuple[str, list[str], dict]:
    """SELECT of every concrete column, their attribute names, and the converters the ORM
    applies to them (booleans and dates on SQLite, JSON everywhere), built once per model and
    connection (the converters belong to the connection's thread)."""
    cache = database.__dict__.setdefault("_memory_row_reads", {})
    if model not in cache:
        from django.db.models.sql import Query

        fields = model._meta.concrete_fields
        quote = database.ops.quote_name
        columns = ", ".join(quote(field.column) for field in fields)
        compiler = database.ops.compiler("SQLCompiler")(Query(model), database, database.alias)
        converters = compiler.get_converters([f.get_col(model._meta.db_table) for f in fields])
        cache[model] = (
            f"SELECT {columns} FROM {quote(model._meta.db_table)}",
            [field.attname for field in fields],
            converters,
        )
    return cache[model]


class ActorType(models.TextChoices):
    OPERATOR = "operator"
    PIPELINE = "pipeline"
    AGENT = "agent"
    SYSTEM = "system"


class ExtractionStatus(models.TextChoices):
    NONE = "none"
    PENDING = "pending"
    COMPLETED = "completed"
    FAILED = "failed"


class Authority(models.TextChoices):
    """Who asserted a memory (DESIGN: authority): a person in the dashboard or a reviewer's edit,
    an agent through the API or MCP (the default), the pipeline's model, or an import."""

    PERSON = "person"
    AGENT = "agent"
    MODEL = "model"
    IMPORT = "import"


def default_authority(source_type: str | None) -> str:
    """Who asserted a new memory unless its writer says: the model for one the pipeline
    derived, an agent for any other."""
    return Authority.MODEL if source_type == DERIVED_SOURCE_TYPE else Authority.AGENT


class Memory(models.Model):
    id = models.CharField(primary_key=True, max_length=36, default=new_id, editable=False)
    content = models.TextField()
    normalized_content = models.TextField()
    content_hash = models.CharField(max_length=64)
    type = models.CharField(max_length=40, default="fact")
    who = models.CharField(max_length=200, blank=True, default="")
    why = models.CharField(max_length=200, blank=True, default="")
    agent_id = models.CharField(max_length=200, default="default")
    pinned = models.BooleanField(default=False)
    importance = models.FloatField(default=0.5)
    tags = models.JSONField(default=list, blank=True)
    source_type = models.CharField(max_length=40, default="manual")
    source_id = models.CharField(max_length=200, null=True, blank=True)
    version = models.PositiveIntegerField(default=1)
    is_deleted = models.BooleanField(default=False)
    deleted_at = models.DateTimeField(null=True, blank=True)
    extraction_status = models.CharField(
        max_length=20, choices=ExtractionStatus.choices, default=ExtractionStatus.NONE
    )
    extraction_model = models.CharField(max_length=200, null=True, blank=True)
    embedding_model = models.CharField(max_length=200, null=True, blank=True)
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()
    updated_by = models.CharField(max_length=200, default="system")
    asserted_by = models.CharField(
        max_length=10, choices=Authority.choices, default=Authority.AGENT
    )
    # Set by a purge: the row is a tombstone ([purged]), never recovered (pipeline.purge).
    purged_at = models.DateTimeField(null=True, blank=True)
    # From this moment the memory is no longer found (memory.expiry): recall and candidate
    # search leave it out at query time; maintenance purges it some days later.
    expires_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "memories"
        constraints = [
            models.UniqueConstraint(
                fields=["agent_id", "content_hash"],
                condition=Q(is_deleted=False),
                name="memories_active_content_hash_per_agent",
            )
        ]
        indexes = [
            models.Index(
                fields=["agent_id", "is_deleted", "created_at"], name="memories_agent_live"
            ),
            models.Index(fields=["content_hash"], name="memories_content_hash"),
            models.Index(fields=["source_id"], name="memories_source_id"),
            models.Index(fields=["extraction_status"], name="memories_extraction_status"),
            # Only the few memories that expire: the maintenance purge and the list's "expired"
            # filter find them through it.
            models.Index(
                fields=["expires_at"],
                name="memories_expiry",
                condition=Q(expires_at__isnull=False),
            ),
        ]

    def __str__(self) -> str:
        return self.content[:80]

    @property
    def is_derived(self) -> bool:
        return self.source_type == DERIVED_SOURCE_TYPE

    @property
    def is_purged(self) -> bool:
        return self.purged_at is not None

    @property
    def is_expired(self) -> bool:
        return self.expires_at is not None and self.expires_at <= timezone.now()


def holding(agent_ids, content_hashes):
    """The memories that hold a text for its agent (not forgotten; an expired one is revived when
    its text is written again): the one rule of what a duplicate is."""
    return Memory.objects.filter(
        agent_id__in=agent_ids, content_hash__in=content_hashes, is_deleted=False
    )


class MemoryHistory(models.Model):
    """The audit trail. Pipeline decision audits are filed under the source memory."""

    id = models.CharField(primary_key=True, max_length=36, default=new_id, editable=False)
    # Indexed by history_memory_time (memory, created_at): no single-column index to write too.
    memory = models.ForeignKey(
        Memory, on_delete=models.PROTECT, related_name="history", db_index=False
    )
    event = models.CharField(max_length=20)
    old_content = models.TextField(null=True, blank=True)
    new_content = models.TextField(null=True, blank=True)
    changed_by = models.CharField(max_length=200)
    actor_type = models.CharField(max_length=20, choices=ActorType.choices)
    reason = models.TextField(null=True, blank=True)
    metadata = models.JSONField(default=dict, blank=True)
    created_at = models.DateTimeField()

    class Meta:
        db_table = "memory_history"
        ordering = ["created_at", "id"]
        indexes = [models.Index(fields=["memory", "created_at"], name="history_memory_time")]
        verbose_name_plural = "memory history"

    def __str__(self) -> str:
        return f"{self.event} {self.memory_id} by {self.changed_by}"


class MemoryCold(models.Model):
    """A full copy of a memory's row, taken in the same transaction just before a change."""

    archive_id = models.CharField(primary_key=True, max_length=36, default=new_id, editable=False)
    memory = models.ForeignKey(Memory, on_delete=models.PROTECT, related_name="cold_snapshots")
    content = models.TextField()
    normalized_content = models.TextField()
    content_hash = models.CharField(max_length=64)
    type = models.CharField(max_length=40)
    who = models.CharField(max_length=200, blank=True, default="")
    why = models.CharField(max_length=200, blank=True, default="")
    agent_id = models.CharField(max_length=200)
    pinned = models.BooleanField(default=False)
    importance = models.FloatField()
    tags = models.JSONField(default=list)
    source_type = models.CharField(max_length=40)
    source_id = models.CharField(max_length=200, null=True, blank=True)
    version = models.PositiveIntegerField()
    extraction_status = models.CharField(max_length=20)
    extraction_model = models.CharField(max_length=200, null=True, blank=True)
    embedding_model = models.CharField(max_length=200, null=True, blank=True)
    original_created_at = models.DateTimeField()
    original_row_json = models.JSONField()
    archived_reason = models.CharField(max_length=40)
    archived_at = models.DateTimeField()

    class Meta:
        db_table = "memories_cold"
        ordering = ["archived_at"]
        indexes = [models.Index(fields=["memory", "archived_at"], name="cold_memory_time")]
        verbose_name = "cold snapshot"

    def __str__(self) -> str:
        return f"{self.archived_reason} snapshot of {self.memory_id} v{self.version}"


class Embedding(models.Model):
    """One vector per content hash; its integer id is the rowid of the vec_embeddings row."""

    id = models.BigAutoField(primary_key=True)
    content_hash = models.CharField(max_length=64, unique=True)
    vector = models.BinaryField()
    dimensions = models.PositiveIntegerField()
    model = models.CharField(max_length=200)
    source_memory = models.ForeignKey(
        Memory, null=True, blank=True, on_delete=models.SET_NULL, related_name="embeddings"
    )
    created_at = models.DateTimeField()

    class Meta:
        db_table = "embeddings"
        indexes = [models.Index(fields=["model", "dimensions"], name="embeddings_model_dims")]

    def __str__(self) -> str:
        return f"{self.model}[{self.dimensions}] {self.content_hash[:12]}"


class Entity(models.Model):
    name = models.CharField(max_length=300)
    canonical_name = models.CharField(max_length=300)
    entity_type = models.CharField(max_length=40, default="unknown")
    agent_id = models.CharField(max_length=200, default="default")
    mentions = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()

    class Meta:
        db_table = "entities"
        ordering = ["canonical_name"]
        constraints = [
            models.UniqueConstraint(
                fields=["agent_id", "canonical_name"], name="entities_canonical_name_per_agent"
            )
        ]
        verbose_name_plural = "entities"

    def __str__(self) -> str:
        return self.name


class Relation(models.Model):
    source = models.ForeignKey(Entity, on_delete=models.CASCADE, related_name="outgoing")
    target = models.ForeignKey(Entity, on_delete=models.CASCADE, related_name="incoming")
    relation_type = models.CharField(max_length=200)
    confidence = models.FloatField(default=0.5)
    mentions = models.PositiveIntegerField(default=1)
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()

    class Meta:
        db_table = "relations"
        constraints = [
            models.UniqueConstraint(
                fields=["source", "target", "relation_type"], name="relations_unique_edge"
            )
        ]

    def __str__(self) -> str:
        return f"{self.source} -{self.relation_type}-> {self.target}"


class MemoryEntityMention(models.Model):
    # DESIGN names (memory, entity) as the key; the admin cannot edit composite primary keys on
    # Django 5.2, so a surrogate id plus a UNIQUE constraint enforces the same rule.
    # Indexed by the unique (memory, entity) constraint, which leads with it.
    memory = models.ForeignKey(
        Memory, on_delete=models.CASCADE, related_name="entity_mentions", db_index=False
    )
    entity = models.ForeignKey(Entity, on_delete=models.CASCADE, related_name="memory_mentions")
    mention_text = models.CharField(max_length=300)
    confidence = models.FloatField(default=0.8)
    created_at = models.DateTimeField()

    class Meta:
        db_table = "memory_entity_mentions"
        constraints = [
            models.UniqueConstraint(fields=["memory", "entity"], name="mentions_memory_entity")
        ]

    def __str__(self) -> str:
        return f"{self.mention_text} in {self.memory_id}"


class RelationStatement(models.Model):
    """Which memory stated a relation, and how often: a relation lives while a memory that is
    not purged states it (a purge deletes the ones only its memories stated, and an export
    carries the ones its memories state)."""

    # Indexed by the unique (memory, relation) constraint, which leads with it.
    memory = models.ForeignKey(
        Memory, on_delete=models.CASCADE, related_name="relation_statements", db_index=False
    )
    relation = models.ForeignKey(Relation, on_delete=models.CASCADE, related_name="statements")
    mentions = models.PositiveIntegerField(default=1)

    class Meta:
        db_table = "relation_statements"
        constraints = [
            models.UniqueConstraint(
                fields=["memory", "relation"], name="relation_statements_memory_relation"
            )
        ]

    def __str__(self) -> str:
        return f"{self.relation_id} stated by {self.memory_id}"


class JobStatus(models.TextChoices):
    PENDING = "pending"
    LEASED = "leased"
    COMPLETED = "completed"
    DEAD = "dead"
    CANCELLED = "cancelled"


class Job(models.Model):
    """The job row is the source of truth; django-q2 only carries a hand-off of its id."""

    id = models.CharField(primary_key=True, max_length=36, default=new_id, editable=False)
    memory = models.ForeignKey(
        Memory, null=True, blank=True, on_delete=models.PROTECT, related_name="jobs"
    )
    job_type = models.CharField(max_length=40, default="extract")
    status = models.CharField(max_length=20, choices=JobStatus.choices, default=JobStatus.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    max_attempts = models.PositiveIntegerField(default=3)
    leased_at = models.DateTimeField(null=True, blank=True)
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    completed_at = models.DateTimeField(null=True, blank=True)
    failed_at = models.DateTimeField(null=True, blank=True)
    error = models.TextField(null=True, blank=True)
    result = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()

    class Meta:
        db_table = "memory_jobs"
        ordering = ["created_at"]
        indexes = [
            models.Index(fields=["status", "created_at"], name="jobs_status_created"),
            models.Index(fields=["memory", "status"], name="jobs_memory_status"),
        ]

    def __str__(self) -> str:
        return f"{self.job_type} {self.id} ({self.status})"


class ApiToken(models.Model):
    """A bearer token for the JSON API; only its SHA-256 is stored."""

    name = models.CharField(max_length=200)
    token_hash = models.CharField(max_length=64, unique=True)
    prefix = models.CharField(max_length=12)
    agent_id = models.CharField(max_length=200, default="default")
    # An admin's choice at creation: may act for agents other than agent_id (agentId in a body).
    multi_agent = models.BooleanField(default=False)
    scopes = models.JSONField(default=list)
    created_at = models.DateTimeField()
    # Set by api.auth.authenticate, at most once a minute per token (its own UPDATE).
    last_used_at = models.DateTimeField(null=True, blank=True)
    # None: never expires. From then on the token is refused with a 401 saying it expired.
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked = models.BooleanField(default=False)
    # The dashboard user who holds it, set at creation (""; no one): its reviews are theirs.
    owner = models.CharField(max_length=150, blank=True, default="")

    class Meta:
        db_table = "api_tokens"

    def expired(self, now=None) -> bool:
        return self.expires_at is not None and self.expires_at <= (now or timezone.now())

    @property
    def reviewer_name(self) -> str:
        """Who its reviews and erasures are by: its owner, a person who may also review in the
        dashboard (the two-person rule, claims and agreement count them once), else the token."""
        return self.owner or self.name

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"
