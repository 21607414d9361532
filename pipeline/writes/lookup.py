"""The job write's one lookup under the write lock, and what a proposal is recognised by: its
fingerprint (action, normalised fact, target) and the memory its decision names."""

from __future__ import annotations

import hashlib

from memory import expiry
from memory.backend import lock_contents
from memory.content import normalize
from memory.models import Memory, RowsRead
from pipeline.models import RejectionFingerprint


def fingerprint(action: str, fact: str, target_id: str | None) -> str:
    """Same action + same normalised fact + same target = the same proposal."""
    basis = f"{action}|{normalize(fact).normalized}|{target_id or ''}"
    return hashlib.sha256(basis.encode("utf-8")).hexdigest()


def target_of(decided) -> str | None:
    """The id of the memory a decision names (its UPDATE's or DELETE's target), or None."""
    return decided.target.candidate.memory_id if decided.target else None


def look_up(outcome, ready: dict, agent_id: str | None) -> RowsRead | None:
    """Send the one query for every fact (`outcome`: the job's JobOutcome): the agent's memories
    with an ADD fact's content (rows `0, hash, memory id`, or `2, ...` for an expired one), and
    the active rejections a proposal of this job would repeat
    (`1, fingerprint, rejection id`); raw SQL: it runs under the write lock, where the ORM's
    union took longer to build than to run. On PostgreSQL the writers of those contents are
    waited for first (`lock_contents`), so the query, a statement after the wait, sees what they
    wrote. None when there is nothing to look up (or no agent to look it up for)."""
    if agent_id is None:
        return None
    hashes, prints = set(), set()
    for decided in outcome.decisions:
        # Most were computed with the proposals before BEGIN; not again under the lock.
        prepared = ready.get(id(decided))
        if decided.action == "add":
            hashes.add(prepared.text.hash if prepared else normalize(decided.fact.content).hash)
        flagged = decided.contradiction is not None and decided.contradiction.flagged
        if decided.action != "none" or flagged:  # a flagged NONE may have been rejected before
            prints.add(
                prepared.proposal.fingerprint
                if prepared
                else fingerprint(decided.action, decided.fact.content, target_of(decided))
            )
    lock_contents(agent_id, [r.text.hash for r in ready.values()])
    hashes, prints = sorted(hashes), sorted(prints)
    parts, params = [], []
    if hashes:
        # 0: an active memory, 2: an expired one (`_gate_add` brings it back).
        unexpired, now = expiry.unexpired_sql("expires_at")
        parts.append(
            # `NOT is_deleted`, as the partial unique index says it: SQLite uses that index only
            # for the same expression (with `= %s` it scanned every live memory of the agent).
            f"SELECT CASE WHEN {unexpired} THEN 0 ELSE 2 END, content_hash, id "
            f"FROM {Memory._meta.db_table} WHERE agent_id = %s "
            f"AND NOT is_deleted AND content_hash IN ({', '.join(['%s'] * len(hashes))})"
        )
        params += [*now, agent_id, *hashes]
    if prints:
        parts.append(
            f"SELECT 1, fingerprint, CAST(id AS TEXT) FROM {RejectionFingerprint._meta.db_table} "
            f"WHERE agent_id = %s AND active "
            f"AND fingerprint IN ({', '.join(['%s'] * len(prints))})"
        )
        params += [agent_id, *prints]
    if not parts:
        return None
    return RowsRead(" UNION ALL ".join(parts), params)
