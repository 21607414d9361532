"""The transaction rule as a runtime check: model and embedding calls refuse to run inside one;
and whether work can wait for the current transaction's commit."""

from __future__ import annotations

from django.db import connections


class ModelCallInTransaction(RuntimeError):
    """A model or embedding client was called while a database write transaction was open."""


def open_write_transaction() -> str | None:
    """Name of a connection inside an atomic block the code opened (test wrappers don't count)."""
    for conn in connections.all(initialized_only=True):
        if any(not getattr(block, "_from_testcase", False) for block in conn.atomic_blocks):
            return conn.alias
    return None


def ensure_outside_transaction(what: str) -> None:
    """Raise before a model call when a transaction is open: it would hold the write lock."""
    if alias := open_write_transaction():
        raise ModelCallInTransaction(
            f"{what} called inside a database transaction on '{alias}': fetch and embed first, "
            "then write in one short transaction"
        )


def runs_after_commit(connection) -> bool:
    """True inside a write transaction whose commit will run `connection.on_commit` callbacks:
    work deferred there runs once the write lock is released. False outside a transaction, and
    inside a test's wrapping transaction (rolled back, never committed): do the work at once."""
    blocks = connection.atomic_blocks
    return bool(blocks) and not getattr(blocks[0], "_from_testcase", False)
