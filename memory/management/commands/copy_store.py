"""copy_store --to postgres://...: copy this store (every table of every app) into PostgreSQL.

Memories with their history and cold snapshots, embeddings, entities, relations, mentions, jobs,
proposals, model-call logs, the pipeline config and its change log, API tokens, users and groups,
the queue's schedules: every row keeps its id, so links and audit trails stay intact. The target
is migrated first and must hold no memory yet. Its keyword index fills itself (a generated
tsvector); the vector index is filled from the copied float32 vectors. Run it with the web and
queue processes stopped, then point DATABASE_URL at the target.
"""

from __future__ import annotations

import numpy as np
from django.apps import apps
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError
from django.core.management.color import no_style
from django.db import OperationalError, connections, transaction

from memory.backend import is_postgres
from memory.backend.postgres.url import database_settings
from memory.models import Embedding, Memory

TARGET = "copy_store_target"
BATCH = 1000


def copied_models() -> list:
    """Every concrete table Django manages, many-to-many link tables included."""
    return [
        model
        for model in apps.get_models(include_auto_created=True)
        if model._meta.managed and not model._meta.proxy
    ]


def open_target(url: str):
    store = settings.DATABASES["default"]
    connections.settings[TARGET] = database_settings(  # kept like the store's own connection
        url, CONN_MAX_AGE=store["CONN_MAX_AGE"], CONN_HEALTH_CHECKS=store["CONN_HEALTH_CHECKS"]
    )
    connections.configure_settings(connections.settings)
    return connections[TARGET]


def close_target() -> None:
    if TARGET in connections.settings:
        connections[TARGET].close()
        del connections[TARGET]
        del connections.settings[TARGET]


def copy_table(model, source, target) -> int:
    """All rows of one model, ids kept, values prepared by each field for the target engine."""
    fields = model._meta.local_concrete_fields
    table = target.ops.quote_name(model._meta.db_table)
    columns = ", ".join(target.ops.quote_name(field.column) for field in fields)
    insert = f"INSERT INTO {table} ({columns}) VALUES ({', '.join(['%s'] * len(fields))})"
    rows = (
        model._base_manager.using(source.alias)
        .order_by("pk")
        .values_list(*[field.attname for field in fields])
    )
    count, batch = 0, []
    with target.cursor() as cursor:
        for row in rows.iterator(chunk_size=BATCH):
            batch.append(
                [
                    field.get_db_prep_save(value, target)
                    for field, value in zip(fields, row, strict=True)
                ]
            )
            if len(batch) == BATCH:
                cursor.executemany(insert, batch)
                count, batch = count + len(batch), []
        if batch:
            cursor.executemany(insert, batch)
            count += len(batch)
    return count


def index_vectors(source, target) -> int:
    """Fill the target's vector index from the float32 blobs (read from the source, which holds
    the same rows: the target's connection is busy with the bulk load)."""
    from memory.vectors import postgres as vectors_postgres

    rows = Embedding.objects.using(source.alias).order_by("id").values_list("id", "vector")
    pairs = (
        (embedding_id, np.frombuffer(bytes(blob), dtype=np.float32))
        for embedding_id, blob in rows.iterator(chunk_size=BATCH)
    )
    return vectors_postgres.bulk_index(pairs, db=target)


class Command(BaseCommand):
    help = "Copy this store (every table, ids kept) into an empty PostgreSQL database."

    def add_arguments(self, parser):
        parser.add_argument("--to", required=True, help="postgres://user:pass@host:port/db")

    def handle(self, *args, to: str, **options):
        source = connections["default"]
        try:
            target = open_target(to)
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
        try:
            if not is_postgres(target):
                raise CommandError("--to must be a PostgreSQL URL")
            if source.settings_dict["NAME"] == target.settings_dict["NAME"] and (
                is_postgres(source)
                and source.settings_dict["HOST"] == target.settings_dict["HOST"]
                and source.settings_dict["PORT"] == target.settings_dict["PORT"]
            ):
                raise CommandError("the target is the store itself")
            try:
                target.ensure_connection()
            except OperationalError as exc:  # one line, not Django's hundred-line traceback
                first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
                raise CommandError(f"cannot reach the target database: {first}") from None
            call_command("migrate", database=TARGET, verbosity=0, interactive=False)
            if Memory.objects.using(TARGET).exists():
                raise CommandError("the target already holds memories: copy into an empty database")
            self._copy(source, target)
        finally:
            close_target()

    def _copy(self, source, target) -> None:
        models = copied_models()
        tables = ", ".join(target.ops.quote_name(m._meta.db_table) for m in models)
        with transaction.atomic(using=TARGET):
            # Rows the target's own migrations wrote (content types, permissions, the default
            # config) give way to the source's, which every other row points at by id.
            with target.cursor() as cursor:
                cursor.execute(f"TRUNCATE {tables} RESTART IDENTITY CASCADE")
            for model in models:
                count = copy_table(model, source, target)
                if count:
                    self.stdout.write(f"{model._meta.db_table}: {count}")
            with target.cursor() as cursor:
                for statement in target.ops.sequence_reset_sql(no_style(), models):
                    cursor.execute(statement)
            indexed = index_vectors(source, target)
            with target.cursor() as cursor:
                cursor.execute("ANALYZE")  # planner statistics now, not after autovacuum's delay
        self.stdout.write(
            self.style.SUCCESS(
                f"Copied {len(models)} tables; {indexed} vectors indexed. "
                "Point DATABASE_URL at the target to use it."
            )
        )
